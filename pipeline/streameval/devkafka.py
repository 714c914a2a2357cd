"""A local, single-node Apache Kafka (KRaft) for development and CI, without Docker.

The broker comes from the official Apache Kafka artifacts on Maven Central, resolved with
Maven into a cache outside the repository (``$STREAMEVAL_CACHE``, else
``$XDG_CACHE_HOME/streameval``, else ``~/.cache/streameval``), so the second start is offline.
Each instance gets its own directory (data, logs, state), a combined broker/controller on
127.0.0.1 and free ports, and a heap sized for a small shared machine. A stopped instance
restarts (:meth:`KafkaInstance.restart`) on the same ports with its data.

Kafka 4.4, the current line: KRaft only, Java 17. The worker's clients (confluent-kafka) and
the Faust baseline of the benchmarks (aiokafka) both work with it (docs/kafka.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from streameval.resources import resource

__all__ = ["KAFKA_VERSION", "KafkaInstance", "LauncherError", "cache_dir", "ensure_artifacts"]

KAFKA_VERSION = "4.4.0"  # the version in resources/kafka/pom.xml
#: The super user of a secured instance
ADMIN = "admin"
#: JVM options: a small heap and quick start-up for a 2-core machine shared with the tests.
JVM_OPTIONS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)

#: The broker's POM and logging template, package data (``streameval/resources/kafka/``).
KAFKA_FILES = resource("kafka")


class LauncherError(RuntimeError):
    """The local Kafka could not be fetched, started or stopped; the message says why."""


def cache_dir() -> Path:
    """Where artifacts and named instances live (outside the repository)."""
    if os.environ.get("STREAMEVAL_CACHE"):
        return Path(os.environ["STREAMEVAL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streameval"


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def ensure_artifacts(log=print) -> Path:
    """The directory of the broker's jars (and of its command-line tools), resolving them
    with Maven the first time.

    Safe to call from several processes at once (a file lock serialises the download).
    """
    home = cache_dir() / f"kafka-{KAFKA_VERSION}"
    # the jars of this pom, in a directory of their own: another release's pom resolves into
    # another, and a broker running from one keeps its jars
    wanted = hashlib.sha256((KAFKA_FILES / "pom.xml").read_bytes()).hexdigest()[:16]
    libs = home / f"libs-{wanted}"
    if (libs / ".complete").exists():
        return libs
    with _locked(home / ".lock"):
        if (libs / ".complete").exists():
            return libs
        java, mvn = shutil.which("java"), shutil.which("mvn")
        if java is None or mvn is None:
            raise LauncherError(
                "the local Kafka needs Java (17+) and Maven on PATH "
                f"(java: {java or 'missing'}, mvn: {mvn or 'missing'}); install them, or set "
                "STREAMEVAL_TEST_BOOTSTRAP / --bootstrap to use an existing cluster"
            )
        pom = home / "pom.xml"
        shutil.copyfile(KAFKA_FILES / "pom.xml", pom)
        staging = home / f"libs-{wanted}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        log(f"fetching Apache Kafka {KAFKA_VERSION} from Maven Central into {home} ...")
        command = [
            mvn,
            "-B",
            "-q",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-DoutputDirectory={staging}",
            "-DincludeScope=runtime",
        ]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise LauncherError(
                f"Maven could not resolve Apache Kafka {KAFKA_VERSION} ({pom})"
                f" (exit {done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}"
            )
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
        (libs / ".complete").write_text(KAFKA_VERSION)
        prune_jars(home, libs)
    return libs


def prune_jars(home: Path, keep: Path) -> list[Path]:
    """Delete the jar directories of earlier poms under ``home`` (``libs`` and ``libs-*``,
    about 50 MB each) but ``keep`` and those a running process names on its command line (a
    broker started from them, whose JVM may still load classes from them). Nothing is
    deleted where the processes cannot be listed (no Linux ``/proc``). Returns those
    deleted."""
    in_use = _command_lines()
    if in_use is None:
        return []
    gone = []
    for path in sorted(home.glob("libs*")):
        if path == keep or path.is_symlink() or not path.is_dir():
            continue
        if path.name.endswith(".partial"):
            continue
        names = {f"{path}/", f"{os.path.realpath(path)}/"}
        if any(name in line for line in in_use for name in names):
            continue
        shutil.rmtree(path, ignore_errors=True)
        gone.append(path)
    return gone


def _command_lines() -> list[str] | None:
    """The command line of every process this user can see (None without Linux /proc)."""
    if not Path("/proc/self/cmdline").exists():
        return None
    lines = []
    for entry in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(entry.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return lines


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` of the loopback interface now (connections of
    a stopped broker still in TIME_WAIT do not count: the broker sets SO_REUSEADDR too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


#: how long a restart waits for its ports (see :func:`_port_freed`)
PORT_WAIT_S = 5.0


def _port_freed(port: int, wait: float) -> bool:
    """Whether ``port`` is free, or becomes free within ``wait`` seconds.

    Right after a broker dies its port can be held for a moment by one of its own clients:
    the ports the launcher picks lie in the kernel's ephemeral range, and a client that keeps
    reconnecting to a port nobody listens on is sometimes given that very port as its own
    (a TCP self-connect), which it drops as soon as the connection does not answer as a
    broker would. A restart in place waits for that rather than fail."""
    deadline = time.monotonic() + wait
    while not _port_free(port):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)
    return True


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The JVM of a test run must not outlive the test process, even after a SIGKILL."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


@dataclass
class KafkaInstance:
    """One local broker: its directory, ports and process.

    Use :meth:`start`/:meth:`stop`, or ``with KafkaInstance.start(...) as kafka:``.
    ``kafka.bootstrap`` is the address clients use.
    """

    directory: str
    port: int
    controller_port: int
    pid: int | None = None
    #: clients must use SASL/SCRAM-SHA-512 over TLS, and ACLs apply (:meth:`client`)
    secured: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return Path(self.directory) / "logs" / "server.log"

    def client(self, user: str = ADMIN, password: str | None = None) -> dict[str, str]:
        """librdkafka settings to reach this broker: its address, and for a secured one
        SASL/SCRAM-SHA-512 over TLS as ``user`` (the super user by default) with the test CA."""
        config = {"bootstrap.servers": self.bootstrap}
        if self.secured:
            tls = Path(self.directory) / "tls"
            if password is None:
                password = _secrets(Path(self.directory))["admin"]
            config.update(
                {
                    "security.protocol": "SASL_SSL",
                    "sasl.mechanisms": "SCRAM-SHA-512",
                    "sasl.username": user,
                    "sasl.password": password,
                    "ssl.ca.location": str(tls / "ca.pem"),
                }
            )
        return config

    def add_user(self, user: str, password: str) -> None:
        """A SCRAM-SHA-512 user of a secured broker (no rights until ACLs give some)."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        admin = AdminClient({**self.client(), "logger": _quiet()})
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        upsert = UserScramCredentialUpsertion(user, info, password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(30)

    # -- lifecycle --------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        directory: str | Path,
        tie_to_parent: bool = True,
        timeout: float = 90.0,
        log=print,
        secured: bool = False,
    ) -> KafkaInstance:
        """Format a fresh KRaft log directory under ``directory`` and start the broker on new
        ports (whatever ``directory`` held is deleted; :meth:`restart` keeps it).

        With ``tie_to_parent`` the JVM dies with the calling process (for tests); without,
        it keeps running until :meth:`stop` (for ``streameval kafka start``). A ``secured``
        broker takes only SASL/SCRAM-SHA-512 over TLS, with a certificate of a CA made for it
        (``tls/ca.pem`` in its directory) and ACLs; :meth:`client` gives the settings.
        """
        libs = ensure_artifacts(log)
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(directory / "data", ignore_errors=True)
        if secured:
            _make_secrets(directory)
        for attempt in range(5):  # a free port can be taken between choosing and binding
            instance = cls(str(directory), free_port(), free_port(), secured=secured)
            try:
                instance._launch(libs, tie_to_parent, timeout)
                return instance
            except _PortTaken:
                instance.stop()
                if attempt == 4:
                    raise LauncherError("no free port pair after 5 attempts") from None
        raise AssertionError("unreachable")  # pragma: no cover

    def restart(self, tie_to_parent: bool = True, timeout: float = 90.0, log=print) -> None:
        """Start a stopped instance again on its own ports, with its data: the topics, offsets
        and messages it had when it stopped, at the bootstrap address its clients know.

        Raises :class:`LauncherError` when it is running, or when another process now holds
        one of its ports (naming it; ``start`` gives a fresh instance on new ports instead).
        """
        if self.running():
            raise LauncherError(f"the broker in {self.directory} is running (pid {self.pid})")
        for name, port in (("port", self.port), ("controller port", self.controller_port)):
            if not _port_freed(port, PORT_WAIT_S):
                raise LauncherError(
                    f"the {name} {port} of the broker in {self.directory} is taken by another "
                    "process: free it and start again, or start a fresh broker on new ports "
                    "(its topics and messages are deleted)"
                )
        libs = ensure_artifacts(log)
        try:
            self._launch(libs, tie_to_parent, timeout)
        except _PortTaken:
            self.stop()
            raise LauncherError(
                f"the port {self.port} or {self.controller_port} of the broker in "
                f"{self.directory} was taken while it started; start again, or start a fresh "
                "broker on new ports"
            ) from None

    def _launch(self, libs: Path, tie_to_parent: bool, timeout: float) -> None:
        root = Path(self.directory)
        data, logs = root / "data", root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        template = (KAFKA_FILES / "log4j2.properties").read_text()
        (root / "log4j2.properties").write_text(template.replace("{log}", str(logs / "server.log")))
        (root / "server.properties").write_text(self._properties(data))
        java = shutil.which("java") or "java"
        classpath = f"{libs}/*"
        log4j = f"-Dlog4j2.configurationFile={root / 'log4j2.properties'}"
        if not (data / "meta.properties").exists():  # a restart finds it formatted
            self._format(java, classpath, log4j)
        with open(logs / "stdout.log", "ab") as out:
            process = subprocess.Popen(
                [
                    java,
                    *JVM_OPTIONS,
                    "-cp",
                    classpath,
                    log4j,
                    "kafka.Kafka",
                    str(root / "server.properties"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent if tie_to_parent else os.setsid,
            )
        self.pid = process.pid
        self._write_state()
        self._wait_ready(process, timeout)

    def _format(self, java: str, classpath: str, log4j: str) -> None:
        """Format the KRaft log directory with a new cluster id (a fresh instance only: the
        formatter refuses a directory formatted under another id)."""
        root = Path(self.directory)
        formatted = subprocess.run(
            [
                java,
                *JVM_OPTIONS,
                "-cp",
                classpath,
                log4j,
                "kafka.tools.StorageTool",
                "format",
                "-t",
                uuid.uuid4().hex[:22],
                "-c",
                str(root / "server.properties"),
                "--ignore-formatted",
                *self._scram_arguments(),
            ],
            capture_output=True,
            text=True,
        )
        if formatted.returncode != 0:
            raise LauncherError(f"formatting KRaft storage failed:\n{formatted.stderr[-2000:]}")

    def _scram_arguments(self) -> list[str]:
        """The formatter's arguments that create the super user of a secured broker."""
        if not self.secured:
            return []
        password = _secrets(Path(self.directory))["admin"]
        return ["--add-scram", f"SCRAM-SHA-512=[name={ADMIN},password={password}]"]

    def _listeners(self) -> list[str]:
        if not self.secured:
            return [
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
            ]
        secrets = _secrets(Path(self.directory))
        tls = Path(self.directory) / "tls"
        login = "org.apache.kafka.common.security.scram.ScramLoginModule required"
        return [
            f"listeners=SASL_SSL://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=SASL_SSL://127.0.0.1:{self.port}",
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=SASL_SSL",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config={login} "
            f'username="{ADMIN}" password="{secrets["admin"]}";',
            f"ssl.keystore.location={tls / 'broker.p12'}",
            "ssl.keystore.type=PKCS12",
            f"ssl.truststore.location={tls / 'truststore.p12'}",
            "ssl.truststore.type=PKCS12",
            f"ssl.truststore.password={secrets['store']}",
            f"ssl.keystore.password={secrets['store']}",
            f"ssl.key.password={secrets['store']}",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the controller listener (loopback, plaintext) is the broker talking to itself
            f"super.users=User:{ADMIN};User:ANONYMOUS",
            "allow.everyone.if.no.acl.found=false",
        ]

    def _properties(self, data: Path) -> str:
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
                *self._listeners(),
                "controller.listener.names=CONTROLLER",
                f"log.dirs={data}",
                "num.partitions=1",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=8",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=4",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                "num.network.threads=2",
                "num.io.threads=2",
                "log.retention.check.interval.ms=60000",
                "",
            ]
        )

    def _wait_ready(self, process: subprocess.Popen, timeout: float) -> None:
        """Until the broker answers a metadata request (or the JVM died, or time ran out)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                tail = self._log_tail()
                if "BindException" in tail or "Address already in use" in tail:
                    raise _PortTaken()
                raise LauncherError(
                    f"the Kafka JVM exited with {process.returncode}; log {self.log_file}:\n{tail}"
                )
            if _port_open(self.port) and self._serves_metadata() and self._serves_groups():
                return
            time.sleep(0.3)
        tail = self._log_tail()
        self.stop()
        raise LauncherError(f"Kafka did not serve metadata within {timeout:.0f} s:\n{tail}")

    def _serves_metadata(self) -> bool:
        admin = _probe(self.client())
        try:
            metadata = admin.list_topics(timeout=2)
        except Exception:  # not ready yet, whatever the client says
            return False
        return bool(metadata.brokers)

    def _serves_groups(self) -> bool:
        """Whether a consumer group finds its coordinator. A fresh broker creates the offsets
        topic on the first such request and answers "coordinator not available" until it is
        loaded; librdkafka then asks again only once a second, so each client that came too
        early joins its group a second or more late (and a worker's processes one by one)."""
        admin = _probe(self.client())
        try:
            futures = admin.describe_consumer_groups(
                ["streameval-launcher-probe"], request_timeout=2
            )
            futures["streameval-launcher-probe"].result(timeout=3)
        except Exception:  # the coordinator is not there yet
            return False
        return True

    def _log_tail(self, lines: int = 25) -> str:
        for path in (self.log_file, self.log_file.with_name("stdout.log")):
            if path.exists():
                text = path.read_text(errors="replace").splitlines()
                if text:
                    return "\n".join(text[-lines:])
        return "(no log)"

    def transactions(self, *arguments: str, timeout: float = 120.0) -> str:
        """What ``kafka-transactions.sh --bootstrap-server <this broker> <arguments>`` prints:
        ``find-hanging --broker-id 1 --max-transaction-timeout 1`` lists the transactions
        the broker left hanging, ``abort --topic T --partition P --start-offset O`` ends one
        — what an operator does (docs/operations.md, "A hanging transaction")."""
        if self.secured:
            raise LauncherError("transactions(): for an instance without TLS and SASL only")
        done = subprocess.run(
            [
                shutil.which("java") or "java",
                *JVM_OPTIONS,
                "-cp",
                f"{ensure_artifacts()}/*",
                "org.apache.kafka.tools.TransactionsCommand",
                "--bootstrap-server",
                self.bootstrap,
                *arguments,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise LauncherError(
                f"kafka-transactions {' '.join(arguments)} failed (exit {done.returncode}):\n"
                f"{(done.stdout + done.stderr)[-2000:]}"
            )
        return done.stdout

    def running(self) -> bool:
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            command = Path(f"/proc/{self.pid}/cmdline").read_bytes().split(b"\0")
        except FileNotFoundError:
            return False
        if stat.split(") ", 1)[1][0] == "Z":  # a zombie of ours is not running
            return False
        # after a reboot the pid may belong to another process: only our broker counts
        ours = str(Path(self.directory) / "server.properties").encode()
        return b"kafka.Kafka" in command and ours in command

    def kill(self) -> None:
        """SIGKILL the JVM, as a crash would; its data stays for :meth:`restart`."""
        if self.pid is not None and self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self.stop(timeout=0)  # reaps it

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the JVM (a clean shutdown), SIGKILL after ``timeout``; idempotent."""
        if self.pid is None:
            return
        if not self.running():  # gone already, or the pid now belongs to someone else
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)  # reap our own zombie, if it is one
            self.pid = None
            self._write_state()
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, os.WNOHANG)
            time.sleep(0.1)
        if self.running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.pid = None
        self._write_state()

    def __enter__(self) -> KafkaInstance:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- named instances (streameval kafka start|stop|status) --------------------------------
    def _write_state(self) -> None:
        (Path(self.directory) / "state.json").write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, directory: str | Path) -> KafkaInstance | None:
        path = Path(directory) / "state.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))

    @staticmethod
    def named(name: str) -> Path:
        return cache_dir() / "instances" / name


class _PortTaken(Exception):
    pass


def _quiet():
    from streameval.clients import QUIET

    return QUIET


def _probe(client: dict[str, str]):
    """A short-lived admin client asking whether the broker is up, its own log lines (refused
    connections while the broker starts, a purge when it is dropped) kept off the terminal."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({**client, "socket.timeout.ms": 2000, "logger": _quiet()})


def _secrets(root: Path) -> dict[str, str]:
    return json.loads((root / "tls" / "secrets.json").read_text())


def _make_secrets(root: Path) -> None:
    """A test CA, the broker's certificate for 127.0.0.1 signed by it (PKCS#12, for the
    broker), the CA's certificate (PEM, for clients), and the passwords: made with the JDK's
    keytool, which every machine that runs Kafka has. Kept readable by this user only."""
    import secrets as random_secrets

    keytool = shutil.which("keytool")
    if keytool is None:
        raise LauncherError("a secured broker needs the JDK's keytool on the PATH")
    tls = root / "tls"
    shutil.rmtree(tls, ignore_errors=True)
    tls.mkdir(mode=0o700, parents=True)
    store = random_secrets.token_urlsafe(18)
    passwords = {"admin": random_secrets.token_urlsafe(18), "store": store}
    secret_file = tls / "secrets.json"
    secret_file.touch(mode=0o600)
    secret_file.write_text(json.dumps(passwords))

    def run(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [keytool, *args, "-storepass", store, "-storetype", "PKCS12"],
            input=stdin,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise LauncherError(f"keytool {args[0]} failed: {(done.stdout + done.stderr)[-800:]}")
        return done.stdout

    ca, broker = str(tls / "ca.p12"), str(tls / "broker.p12")
    key = ("-keyalg", "RSA", "-keysize", "2048", "-validity", "30", "-keypass", store)
    run("-genkeypair", "-alias", "ca", "-dname", "CN=streameval test CA", "-ext", "bc:c",
        "-keystore", ca, *key)  # fmt: skip
    run("-exportcert", "-alias", "ca", "-rfc", "-keystore", ca, "-file", str(tls / "ca.pem"))
    run("-genkeypair", "-alias", "broker", "-dname", "CN=localhost", "-keystore", broker, *key)
    request = run("-certreq", "-alias", "broker", "-keystore", broker)
    signed = run("-gencert", "-alias", "ca", "-keystore", ca, "-rfc", "-validity", "30",
                 "-ext", "SAN=ip:127.0.0.1,dns:localhost", stdin=request)  # fmt: skip
    (tls / "broker.pem").write_text(signed)
    run("-importcert", "-alias", "ca", "-file", str(tls / "ca.pem"), "-keystore", broker,
        "-noprompt")  # fmt: skip
    run("-importcert", "-alias", "broker", "-file", str(tls / "broker.pem"), "-keystore", broker)
    # the broker's own client side (it talks to itself over SASL_SSL) trusts the CA
    run("-importcert", "-alias", "ca", "-file", str(tls / "ca.pem"), "-keystore",
        str(tls / "truststore.p12"), "-noprompt")  # fmt: skip
