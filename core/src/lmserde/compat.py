"""Which core a plugin was built for: its ``Requires-Dist: lmserde ...`` range, checked at discovery.

A plugin declares the core API it needs the standard way, as a dependency range on the ``lmserde``
distribution in its ``pyproject.toml`` (``dependencies = ["lmserde>=0.1,<0.2"]``). The core API
version is core's release version, :data:`API_VERSION`; the minor number changes whenever the
plugin-facing API changes incompatibly (0.x), the major number after 1.0. pip enforces the range at
install time, but ``--no-deps`` installs, a later core upgrade or a copied site-packages can still
pair a plugin with a core it was not built for; discovery therefore checks the range again, reading
only the installed metadata (the plugin is never imported), and refuses the plugin with a message
naming both versions. A plugin that declares no range is accepted.
"""

from __future__ import annotations

from importlib.metadata import Distribution

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lmserde._version import __version__

__all__ = ["API_VERSION", "CORE_DISTRIBUTION", "core_requirement", "incompatibility"]

#: The plugin-facing API version of this core (its release version).
API_VERSION = __version__

#: The distribution name plugins depend on.
CORE_DISTRIBUTION = "lmserde"


def core_requirement(requires: list[str] | None) -> Requirement | None:
    """The unconditional ``lmserde`` requirement among ``Requires-Dist`` lines, if any.

    Requirements guarded by an environment marker that does not hold here (an extra such as
    ``test``, another Python version) are ignored; malformed lines are skipped.
    """
    for line in requires or ():
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != CORE_DISTRIBUTION:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        return req
    return None


def incompatibility(dist: Distribution | None, core_version: str = API_VERSION) -> str | None:
    """Why ``dist`` cannot run on this core (``None`` when it can, or declares no range)."""
    if dist is None or canonicalize_name(dist.metadata["Name"] or "") == CORE_DISTRIBUTION:
        return None
    req = core_requirement(dist.requires)
    if req is None or not str(req.specifier):
        return None
    try:
        version = Version(core_version)
    except InvalidVersion:
        return None
    if req.specifier.contains(version, prereleases=True):
        return None
    return (f"built for lmserde{req.specifier} but this core is lmserde {core_version}; "
            f"install a release of {dist.metadata['Name']} made for lmserde {core_version}")
