"""An optional compiled extension of a plugin: imported once, switchable, and reported alike.

A plugin that ships C code (built by ``lmserde_native_build.py``; see docs/plugin-guide.md) also
ships a pure-Python path writing the same bytes, for an install without a compiler. Every such
plugin needs the same few things, which :class:`NativeExtension` holds in one place::

    FASTCODEC = NativeExtension("lmserde_foo._fastcodec", distribution="lmserde-foo",
                                simd=lambda m: str(m.simd()), switch_env="LMSERDE_FOO_NATIVE",
                                switch_setter="set_native_enabled")

    if FASTCODEC.available():          # built, importable and not switched off
        FASTCODEC.require().encode(...)
    FOO_SPEC = SerdeSpec(..., native_status=FASTCODEC.status)

* the extension is imported once, when the object is made; an ``ImportError`` (built without a
  compiler, or with ``LMSERDE_<PLUGIN>_NO_EXTENSION=1``) is kept as the reason, never raised;
* an optional environment switch (``switch_env``, read once: ``0``, ``false`` or ``no`` turn the
  native path off) and :meth:`NativeExtension.set_enabled` turn it off process-wide;
* :meth:`NativeExtension.status` answers in the vocabulary every plugin shares (``backend``,
  ``simd``, ``built``, ``reason``), the one ``SerdeSpec.native_status``, ``lmserde info`` and
  ``lmserde plugins --json`` show;
* :meth:`NativeExtension.log_fallback_once` logs, once per process, that the slow path runs.

``LMSERDE_REQUIRE_NATIVE=1`` is a build-time switch (the build fails instead of installing
without the extension); at run time the status says which path runs.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["NativeExtension"]

_OFF = ("0", "false", "no")


class NativeExtension:
    """The optional extension module ``module`` of ``distribution`` and the switch that uses it.

    ``simd`` maps the loaded module to the name of the instruction level it runs (e.g.
    ``"avx2"``, ``"scalar"``); ``fallback`` names the backend used without it (``"torch"``).
    ``switch_env`` (optional) is the environment variable that turns the native path off at
    import, ``switch_setter`` the plugin's public function that does it at run time (named in
    the status's reason).
    """

    def __init__(self, module: str, *, distribution: str, simd: Callable[[ModuleType], str],
                 fallback: str = "torch", switch_env: str | None = None,
                 switch_setter: str | None = None) -> None:
        self.module_name = module
        self.distribution = distribution
        self.fallback = fallback
        self._simd = simd
        self._switch_env = switch_env
        self._switch_setter = switch_setter
        self._import_error: str | None = None
        self._module: ModuleType | None = None
        try:
            self._module = importlib.import_module(module)
        except ImportError as exc:
            self._import_error = f"{type(exc).__name__}: {exc}"
        self._enabled = switch_env is None or \
            os.environ.get(switch_env, "1").strip().lower() not in _OFF
        self._fallback_logged = False
        self._fallback_lock = threading.Lock()

    @property
    def module(self) -> ModuleType | None:
        """The extension module, or ``None`` when it was not built (or cannot be imported)."""
        return self._module

    def built(self) -> bool:
        """Whether the extension was built and imported (switched off or not)."""
        return self._module is not None

    def available(self) -> bool:
        """Whether the native path runs: built, importable and not switched off."""
        return self._module is not None and self._enabled

    def set_enabled(self, enabled: bool) -> None:
        """Use (or stop using) the native path process-wide; the fallback writes the same bytes."""
        self._enabled = bool(enabled)

    def require(self) -> ModuleType:
        """The extension module; ``RuntimeError`` naming the reason when it was not built."""
        if self._module is None:
            raise RuntimeError(
                f"the native extension {self.module_name} is not built ({self._import_error}); "
                f"reinstall {self.distribution} with a C compiler available, or use the "
                f"{self.fallback} path")
        return self._module

    def simd(self) -> str | None:
        """The instruction level the extension runs on this CPU; ``None`` when not built."""
        return None if self._module is None else self._simd(self._module)

    def status(self) -> dict[str, Any]:
        """What this process runs: ``backend`` (``"native"`` or the fallback's name), ``simd``
        (:meth:`simd`), ``built`` and, on the fallback, the ``reason``."""
        if self._module is None:
            return {"backend": self.fallback, "simd": None, "built": False,
                    "reason": f"the native extension {self.module_name} is not built "
                              f"({self._import_error}); reinstall {self.distribution} with a "
                              "C compiler"}
        simd = self.simd()
        if not self._enabled:
            how = " or ".join([*([f"{self._switch_env}=0"] if self._switch_env else []),
                               *([f"{self._switch_setter}(False)"] if self._switch_setter
                                 else [])])
            return {"backend": self.fallback, "simd": simd, "built": True,
                    "reason": f"disabled ({how or 'set_enabled(False)'})"}
        return {"backend": "native", "simd": simd, "built": True}

    def log_fallback_once(self, logger: logging.Logger, what: str) -> None:
        """Log once per process that ``what`` (e.g. "the foo serde runs its pure-torch codec")
        runs instead of the native code: a warning when the extension was not built, at INFO
        level when it was switched off on purpose; nothing when the native path runs. Meant for
        the moment a processor is built, off the data path."""
        status = self.status()
        if status["backend"] == "native":
            return
        with self._fallback_lock:
            if self._fallback_logged:
                return
            self._fallback_logged = True
        level = logging.WARNING if not status["built"] else logging.INFO
        logger.log(level, "%s: %s (the same bytes, several times slower): %s",
                   self.distribution, what, status["reason"])
