"""pluggy hook plugins from the ``lmserde.hooks`` entry-point group, with failure isolation."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from lmserde import AsyncSerdeProcessor
from lmserde.hooks import get_plugin_manager, hook_plugin_records
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.testing import wait_for_result

OBSERVER = '''
import argparse
from lmserde import hookimpl

EVENTS = []

@hookimpl
def lmserde_serde_task_finished(event):
    EVENTS.append(event)

def _hello(args):
    print(f"hello {args.who}")
    return 0

@hookimpl
def lmserde_add_cli_commands(subparsers):
    p = subparsers.add_parser("hello", help="say hello")
    p.add_argument("who")
    p.set_defaults(handler=_hello)
'''


def _install(install: Callable[..., Path]) -> Path:
    site = install("lmserde-testplugin-observer", "1.2",
                   entry_points={"lmserde.hooks": {"observer": "lmserde_testplugin_observer"}},
                   modules={"lmserde_testplugin_observer": OBSERVER})
    install("lmserde-testplugin-badhook", "0.1",
            entry_points={"lmserde.hooks": {"badhook": "lmserde_testplugin_badhook"}},
            modules={"lmserde_testplugin_badhook": "raise RuntimeError('hook plugin is broken')\n"})
    return site


def test_hook_plugins_receive_events_and_broken_ones_are_isolated(
    plugin_site: Callable[..., Path],
) -> None:
    _install(plugin_site)
    pm = get_plugin_manager()
    records = {r.name: r for r in hook_plugin_records()}
    assert records["badhook"].status == "failed"
    assert "hook plugin is broken" in str(records["badhook"].error)
    assert records["observer"].status == "loaded"
    with AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), serde_type="obs") as p:
        assert wait_for_result(p, p.submit_serialize([], [], []), serialize=True)
    module = sys.modules["lmserde_testplugin_observer"]
    assert [e.serde_type for e in module.EVENTS] == ["obs"]
    assert pm is get_plugin_manager()


def test_plugin_cli_subcommand_runs(plugin_site: Callable[..., Path]) -> None:
    site = _install(plugin_site)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-m", "lmserde.cli.main", "hello", "world"], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "hello world" in result.stdout
    listing = subprocess.run([sys.executable, "-m", "lmserde.cli.main", "plugins", "--load"],
                             env=env, capture_output=True, text=True, timeout=120, check=False)
    assert listing.returncode == 0
    assert "badhook" in listing.stdout and "hook plugin is broken" in listing.stdout
