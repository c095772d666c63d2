"""pluggy hook plugins from the ``lmserde.hooks`` entry-point group, with failure isolation."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from lmserde import AsyncSerdeProcessor
from lmserde.hooks import flush_events, get_plugin_manager, hook_plugin_records
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
    assert flush_events()
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


LOAD_LOGGER = '''
import os, threading
from lmserde import hookimpl

with open(os.environ["LMSERDE_TEST_HOOK_LOG"], "a") as f:  # one line per import of this module
    f.write(threading.current_thread().name + "\\n")

EVENTS = []

@hookimpl
def lmserde_serde_task_finished(event):
    EVENTS.append(threading.current_thread().name)
'''

LOAD_ONCE_SCRIPT = '''
import sys, threading
from lmserde import AsyncSerdeProcessor
from lmserde.hooks import get_plugin_manager
from lmserde.identity import IdentityDeserializer, IdentitySerializer
from lmserde.hooks import flush_events
from lmserde.testing import wait_for_result

assert "lmserde_testplugin_loadlog" not in sys.modules  # importing lmserde loads no hook plugin
procs = [AsyncSerdeProcessor(IdentitySerializer(), IdentityDeserializer(), 2, serde_type=f"p{i}")
         for i in range(2)]
assert "lmserde_testplugin_loadlog" in sys.modules  # loaded when the first processor was built
before = set(sys.modules)
done = []

def run(p):
    for _ in range(3):
        done.append(wait_for_result(p, p.submit_serialize([], [], []), serialize=True))

threads = [threading.Thread(target=run, args=(p,)) for p in procs]
for t in threads:
    t.start()
for t in threads:
    t.join()
for p in procs:
    p.close()
get_plugin_manager()
assert done == [True] * 6
assert flush_events()
events = sys.modules["lmserde_testplugin_loadlog"].EVENTS
# delivered off the workers, on the one event thread
assert len(events) == 6 and set(events) == {"lmserde-events"}, events
assert set(sys.modules) - before == set(), set(sys.modules) - before  # nothing imported by events
print("OK")
'''


def test_hook_plugins_load_once_when_a_processor_is_built_never_on_workers(
    plugin_site: Callable[..., Path], tmp_path: Path,
) -> None:
    site = plugin_site("lmserde-testplugin-loadlog", "1.0",
                       entry_points={"lmserde.hooks": {"loadlog": "lmserde_testplugin_loadlog"}},
                       modules={"lmserde_testplugin_loadlog": LOAD_LOGGER})
    log = tmp_path / "imports.log"
    env = dict(os.environ, LMSERDE_TEST_HOOK_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", LOAD_ONCE_SCRIPT], env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "OK"
    assert log.read_text().splitlines() == ["MainThread"]  # imported once, on the main thread


def test_events_never_load_hook_plugins(plugin_site: Callable[..., Path]) -> None:
    from lmserde.hooks import emit_serde_task_event, reset_plugin_manager
    from lmserde.observability import SerdeTaskEvent

    _install(plugin_site)
    reset_plugin_manager()
    event = SerdeTaskEvent(serde_type="x", direction="serialize", task_id=1, num_objects=0,
                           bytes_in=0, bytes_out=0, seconds=0.0, ok=True, error_class=None,
                           failed_items=())
    emit_serde_task_event(event)  # nothing loaded yet: delivered to no one, imports nothing
    assert "lmserde_testplugin_observer" not in sys.modules
    get_plugin_manager()
    emit_serde_task_event(event)
    assert flush_events()
    assert [e.serde_type for e in sys.modules["lmserde_testplugin_observer"].EVENTS] == ["x"]
