"""Throwaway ``redis-server`` processes on loopback ports, for tests and benchmarks.

:class:`LocalRedisServer` runs one server; :class:`LocalRedisCluster` runs a Redis Cluster of
``masters`` shards with ``replicas`` replicas each, created with ``redis-cli --cluster create``.
Everything binds to ``127.0.0.1``, keeps no data on disk (no RDB, no AOF) and lives in a
directory the caller owns. Servers run in the foreground as child processes, so they can be
killed (:meth:`LocalRedisServer.kill`) and restarted on the same port.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import redis
from lmserde.testing import (
    LOOPBACK_HOST,
    LoopbackChildServer,
    free_loopback_port,
    kill_child,
    log_tail,
    start_child,
    stop_child,
    wait_until,
)

__all__ = [
    "RedisServerNotFoundError",
    "LocalRedisServer",
    "LocalRedisCluster",
    "free_loopback_port",
    "find_redis_binary",
]

HOST = LOOPBACK_HOST

_INSTALL_HINT = (
    "install it (Debian/Ubuntu: `apt-get install -y redis-server`; macOS: `brew install redis`) "
    "or point LMSERDE_REDIS_SERVER / LMSERDE_REDIS_CLI at the binaries"
)


class RedisServerNotFoundError(RuntimeError):
    """``redis-server`` (or ``redis-cli``) is not installed."""


def find_redis_binary(name: str = "redis-server") -> str:
    """Path of ``redis-server`` or ``redis-cli`` (env ``LMSERDE_REDIS_SERVER``/``_CLI`` first)."""
    env = "LMSERDE_REDIS_SERVER" if name == "redis-server" else "LMSERDE_REDIS_CLI"
    candidate = os.environ.get(env) or shutil.which(name)
    if not candidate or not os.access(candidate, os.X_OK):
        raise RedisServerNotFoundError(f"{name} was not found on PATH; {_INSTALL_HINT}")
    return candidate


def _wait(condition: Callable[[], bool], what: str, timeout: float, log: Path | None = None) -> None:
    wait_until(condition, what, timeout, retry_on=(redis.RedisError, OSError), log=log)


class LocalRedisServer(LoopbackChildServer):
    """One ``redis-server`` on ``127.0.0.1:port`` as a child process.

    ``extra_args`` are appended to the command line (e.g. ``["--cluster-enabled", "yes"]``).
    Use as a context manager or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
    ) -> None:
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="lmserde-redis-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.port = port or free_loopback_port()
        self.extra_args = list(extra_args)
        self.startup_timeout = startup_timeout
        self._binary = find_redis_binary("redis-server")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / f"redis-{self.port}.log"

    def command(self) -> list[str]:
        return [self._binary, "--port", str(self.port), "--bind", HOST, "--save", "",
                "--appendonly", "no", "--dir", str(self.directory), "--logfile",
                str(self.log_path), "--daemonize", "no", *self.extra_args]

    def client(self, **kwargs: object) -> redis.Redis:
        """A plain redis-py client for this server (short timeouts)."""
        return redis.Redis(host=HOST, port=self.port, socket_timeout=2, socket_connect_timeout=2,
                           **kwargs)  # type: ignore[arg-type]

    def start(self) -> LocalRedisServer:
        """Start (or restart) the server on its port and wait until it answers ``PING``."""
        if self.running:
            return self
        self._process = start_child(self.command())

        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(
                    f"redis-server on port {self.port} exited with {self._process.returncode}; "
                    f"log {self.log_path}:\n{self._log_tail()}"
                )
            with self.client() as c:
                return bool(c.ping())

        try:
            _wait(ready, f"redis-server on port {self.port} answering PING", self.startup_timeout,
                  self.log_path)
        except BaseException:
            self.stop()  # never leave a half-started server behind
            raise
        return self

    def _log_tail(self) -> str:
        return log_tail(self.log_path)

    def kill(self) -> None:
        """SIGKILL the server (a crash: open connections drop at once) and reap it."""
        if self._process is not None:
            kill_child(self._process)

    def stop(self) -> None:
        """Terminate the server (SIGTERM, then SIGKILL after 5 s); idempotent."""
        if self._process is not None:
            stop_child(self._process)

    def close(self) -> None:
        """Stop the server and remove the directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


class LocalRedisCluster:
    """A Redis Cluster of ``masters`` shards and ``replicas`` replicas per shard on loopback.

    ``node_timeout_ms`` is the cluster's failure-detection time (a replica is promoted about
    that long after its master dies). Each node's cluster bus uses its own free port.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None = None,
        *,
        masters: int = 3,
        replicas: int = 0,
        node_timeout_ms: int = 1000,
        startup_timeout: float = 30.0,
    ) -> None:
        if masters < 3:
            raise ValueError(f"Redis Cluster needs at least 3 masters, got {masters}")
        self._own_dir = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="lmserde-redis-cluster-"))
        self.masters = masters
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.startup_timeout = startup_timeout
        self._cli = find_redis_binary("redis-cli")
        self.nodes: list[LocalRedisServer] = []
        used: list[int] = []
        for _ in range(masters * (1 + replicas)):
            port = free_loopback_port(used)
            bus = free_loopback_port([*used, port])
            used += [port, bus]
            node_dir = self.directory / f"node-{port}"
            self.nodes.append(LocalRedisServer(
                node_dir, port=port, startup_timeout=startup_timeout,
                extra_args=["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", str(node_timeout_ms),
                            "--cluster-port", str(bus), "--cluster-announce-ip", HOST,
                            "--cluster-require-full-coverage", "no",
                            "--cluster-allow-reads-when-down", "no"],
            ))

    @property
    def startup_nodes(self) -> list[str]:
        return [n.address for n in self.nodes]

    def start(self) -> LocalRedisCluster:
        """Start every node, create the cluster and wait until every node reports it healthy."""
        for node in self.nodes:
            node.start()
        result = subprocess.run(
            [self._cli, "--cluster", "create", *self.startup_nodes, "--cluster-replicas",
             str(self.replicas), "--cluster-yes"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=self.startup_timeout,
        )
        if result.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed ({result.returncode}):\n"
                               f"{result.stdout}\n{result.stderr}")
        self.wait_until_healthy()
        return self

    def _node_state(self, node: LocalRedisServer) -> tuple[str, int, int]:
        """(cluster_state, number of known nodes, connected replicas if a master)."""
        with node.client() as c:
            info = c.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
            replication = c.info("replication")
        return (fields.get("cluster_state", ""), int(fields.get("cluster_known_nodes", 0)),
                int(replication.get("connected_slaves", 0)))

    def masters_now(self) -> list[LocalRedisServer]:
        """Running nodes that currently are masters."""
        found = []
        for node in self.nodes:
            if not node.running:
                continue
            with node.client() as c:
                if c.info("replication").get("role") == "master":
                    found.append(node)
        return found

    def wait_until_healthy(self, timeout: float | None = None) -> None:
        """Every running node says ``cluster_state:ok`` and knows every node, every master has its
        replicas attached, and ``masters`` masters are running."""
        total = len(self.nodes)

        def healthy() -> bool:
            running = [n for n in self.nodes if n.running]
            states = [self._node_state(n) for n in running]
            if not all(s[0] == "ok" and s[1] == total for s in states):
                return False
            masters = self.masters_now()
            if len(masters) != self.masters:
                return False
            return all(self._node_state(m)[2] >= self.replicas for m in masters) or \
                len(running) < total

        _wait(healthy, "cluster_state:ok on every node", timeout or self.startup_timeout)

    def node_for(self, name: bytes) -> LocalRedisServer:
        """The running master currently owning the slot of key ``name``."""
        for node in self.masters_now():
            with node.client() as c:
                slot = int(c.execute_command("CLUSTER", "KEYSLOT", name))
                for start, end, *_rest in c.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        owner_port = int(_rest[0][1])
                        return next(n for n in self.nodes if n.port == owner_port)
        raise RuntimeError(f"no running master owns the slot of {name!r}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def close(self) -> None:
        """Stop every node and remove the directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> LocalRedisCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
