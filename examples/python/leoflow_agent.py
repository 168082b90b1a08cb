#!/usr/bin/env python3
"""A Leoflow agent in Python: runs task attempts pushed by the control plane.

It speaks the agent side of ``proto/leoflow/v1/agent.proto`` (AgentService.Connect, one
bidirectional gRPC stream). The conversation:

1. Open Connect and send Hello (protocol version, agent id, labels, slots, held attempts, and
   the incarnation id: a random id made once per process).
2. Wait for Welcome (at most 10 s, else try the next address): it gives the keepalive interval,
   the longest reconnect backoff to use, and says which held attempts are still current
   (resumed: keep them) and which are not (superseded: stop them, never report them).
3. Then react to Assign (run a command as a new process group, report Started, Log lines and
   Finished), Cancel (stop the group, finish CANCELLED), Drain (no new work), KeepaliveAck,
   FinishedAck (the result is recorded: forget the attempt) and Reconnect (the replica is
   stopping: end the stream and connect to the next address at once, keeping the attempts).
4. Send Keepalive every interval, listing every attempt held. No KeepaliveAck for 3 intervals
   means the stream is deaf: drop it and reconnect.

It may be given several control-plane addresses (--server repeated, or separated by commas):
any replica serves agents, so every new stream goes to the next address in turn, and one that
is down costs a single try. One address is enough: it keeps the live replicas' addresses each
Welcome lists (replica_urls), and goes where a Reconnect says. On any stream error it reconnects with jittered exponential backoff,
never longer than Welcome.max_reconnect_backoff, saying in Hello.held what it still holds, so
nothing runs twice. FAILED_PRECONDITION before Welcome (e.g. an unsupported protocol version) is
fatal: the message is printed and the agent exits with status 2.

Generate the stubs first (see README.md), then:
    PYTHONPATH=/tmp/leoflow-py /usr/bin/python3 leoflow_agent.py --server 127.0.0.1:7070 \\
        --labels lang=python --slots 2
or, knowing two replicas:
    ... leoflow_agent.py --server cp-a:7070 --server cp-b:7070 --labels lang=python
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import random
import re
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from typing import IO, Iterable, Iterator, Optional

import grpc
from leoflow.v1 import agent_pb2 as pb
from leoflow.v1 import agent_pb2_grpc

log = logging.getLogger("leoflow-agent")
_STOP = object()  # ends a stream's request iterator (half-closes the stream)
# Made once per process and sent in every Hello: the control plane then tells this process from a
# restarted one, and never sends an attempt given to one of them to the other.
INCARNATION_ID = str(uuid.uuid4())
# No Welcome this long after Hello: the address is not answering; drop the stream, try the next.
WELCOME_TIMEOUT = 10.0
MAX_SERVERS = 16  # more addresses than this is a mistake, not a cluster
# A fresh channel per stream, on a connection of its own (gRPC shares connections between channels
# to one address by default): after a broken or deaf stream the agent wants a new connection, not
# one the old channel is still backing off from.
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0), ("grpc.use_local_subchannel_pool", 1)]



MAX_SECRET_FILE_BYTES = 64 * 1024


def resolve_secrets(refs) -> tuple[dict[str, str], str]:
    """Assign.secret_env resolved on this machine, or the reason one cannot be (naming the
    variable and where it was looked for, never a value). Values are never logged."""
    out: dict[str, str] = {}
    for name, ref in refs.items():
        source = ref.WhichOneof("source")
        where = f"{source} {ref.env or ref.file or (ref.kubernetes.name + '/' + ref.kubernetes.key)}"
        if source == "env":
            value = os.environ.get(ref.env)
            if value is None:
                return {}, f"secret {name} ({where}): environment variable {ref.env} is not set where the task starts"
        elif source == "file":
            try:
                with open(ref.file, "rb") as f:
                    data = f.read(MAX_SECRET_FILE_BYTES + 1)
            except OSError as e:
                return {}, f"secret {name} ({where}): cannot read {ref.file}: {e.strerror}"
            if len(data) > MAX_SECRET_FILE_BYTES:
                return {}, f"secret {name} ({where}): {ref.file} is larger than {MAX_SECRET_FILE_BYTES} bytes"
            value = data.decode("utf-8", errors="replace")
        elif source == "kubernetes":
            # Only a pod is given a Kubernetes Secret, under the variable's own name.
            value = os.environ.get(name)
            if value is None:
                return {}, f"secret {name} ({where}): a Kubernetes Secret is given only to a pod of the kubernetes executor"
        else:
            return {}, f"secret {name}: a SecretRef with no source"
        if "\0" in value:
            return {}, f"secret {name} ({where}): the value holds a NUL byte"
        out[name] = value
    return out, ""

class Backoff:
    """Reconnect delays: exponential with full jitter (a random delay between 0 and a ceiling that
    doubles per try), so a fleet of agents cut off by one restart does not come back in lockstep.

    The control plane bounds the ceiling (Welcome.max_reconnect_backoff, a fraction of its
    heartbeat threshold): an agent that stays away longer has its attempts declared lost.
    """

    def __init__(self, initial: float = 0.1, maximum: float = 10.0) -> None:
        self.initial, self.maximum = initial, maximum
        self.limit = maximum  # the agent's own maximum, or the control plane's bound if lower
        self.tries = 0

    def bound(self, seconds: float) -> None:
        """Welcome.max_reconnect_backoff: it lowers the ceiling, never raises the agent's own."""
        if seconds > 0:
            self.limit = min(self.maximum, seconds)

    def next(self) -> float:
        ceiling = min(self.limit, self.initial * 2 ** min(self.tries, 30))
        self.tries += 1
        return random.uniform(0, ceiling)

    def reset(self) -> None:
        """After a stream that proved healthy: the next delay starts small again."""
        self.tries = 0


# Statuses that refuse a Hello for good (agent.proto, "Status codes"): stop instead of retrying.
FATAL_AT_HELLO = {
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.UNIMPLEMENTED,
}


class Attempt:
    """One attempt the agent holds: from Assign (or a Hello.held resume) until FinishedAck."""

    def __init__(self, agent: "Agent", assign: pb.Assign) -> None:
        self.agent = agent
        self.assign = assign
        self.ref = assign.attempt
        self.lock = threading.Lock()  # orders this attempt's reports (Started, Log, Finished)
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.started_sent = False
        self.next_seq = 1
        self.unsent: list[pb.LogEntry] = []  # lines not yet handed to a live stream
        self.unacked: list[pb.LogEntry] = []  # lines sent, until a LogAck says they are stored
        self.finished: Optional[pb.Finished] = None  # kept until FinishedAck
        self.stop_reason: Optional[str] = None  # "timeout" | "cancel" | "superseded"
        self.error = ""
        self.dir = ""  # the attempt's own folder (output and inputs files), removed after it

    @property
    def name(self) -> str:
        return f"{self.assign.dag_id}.{self.assign.task_id} ti {self.ref.ti_id} try {self.ref.try_number}"

    def run(self) -> None:
        """Runs in its own thread: spawn, stream output, enforce the timeout, report Finished."""
        a = self.assign
        if not a.command:
            return self._finish(pb.ATTEMPT_OUTCOME_SPAWN_FAILED, None, "", "empty command")
        secrets, problem = resolve_secrets(a.secret_env)
        if problem:
            return self._finish(pb.ATTEMPT_OUTCOME_SPAWN_FAILED, None, "", problem)
        if a.inputs_error:  # an input the DAG names is missing: start nothing, say which
            return self._finish(pb.ATTEMPT_OUTCOME_SPAWN_FAILED, None, "", a.inputs_error)
        self.dir = tempfile.mkdtemp(prefix="leoflow-attempt-")
        try:
            self._run_in_dir(a, secrets)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _run_in_dir(self, a: pb.Assign, secrets: dict[str, str]) -> None:
        # The task writes one JSON value to LEOFLOW_OUTPUT; its upstreams' outputs are in the file
        # LEOFLOW_INPUTS (data in files, never in the command). The task's own env wins over ours.
        ours = {"LEOFLOW_OUTPUT": os.path.join(self.dir, "output")}
        open(ours["LEOFLOW_OUTPUT"], "wb").close()
        if a.inputs_json:
            ours["LEOFLOW_INPUTS"] = os.path.join(self.dir, "inputs.json")
            with open(ours["LEOFLOW_INPUTS"], "w", encoding="utf-8") as f:
                f.write(a.inputs_json)
        try:
            self.proc = subprocess.Popen(
                list(a.command), cwd=a.cwd or None, env={**os.environ, **ours, **dict(a.env), **secrets},
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True)  # its own session, so its own process group
        except OSError as e:
            return self._finish(pb.ATTEMPT_OUTCOME_SPAWN_FAILED, None, "", f"spawn failed: {e}")
        log.info("%s: started pid %d: %s", self.name, self.proc.pid, " ".join(a.command))
        with self.lock:
            self.started_sent = self.agent.send(pb.ConnectRequest(
                started=pb.Started(attempt=self.ref, pid=self.proc.pid)))
        if self.stop_reason:  # cancelled or superseded while spawning
            self.stop(self.stop_reason, self.error)
        timer = None
        if a.HasField("timeout") and a.timeout.ToMilliseconds() > 0:
            ms = a.timeout.ToMilliseconds()
            timer = threading.Timer(ms / 1000, self.stop, ("timeout", f"timed out after {ms} ms"))
            timer.daemon = True
            timer.start()
        readers = [threading.Thread(target=self._pump, args=(pipe, name), daemon=True)
                   for pipe, name in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr"))]
        for t in readers:
            t.start()
        code = self.proc.wait()
        if timer:
            timer.cancel()
        for t in readers:
            t.join(timeout=5)  # a grandchild may keep the pipe open; do not wait for ever
        exit_code = code if code >= 0 else None
        sig = signal.Signals(-code).name if code < 0 else ""
        if self.stop_reason == "timeout":
            self._finish(pb.ATTEMPT_OUTCOME_TIMED_OUT, exit_code, sig, self.error)
        elif self.stop_reason == "cancel":
            self._finish(pb.ATTEMPT_OUTCOME_CANCELLED, exit_code, sig, self.error)
        elif self.stop_reason == "superseded":
            log.info("%s: superseded, stopped without a report", self.name)
        elif code == 0:
            output, problem = self._read_output(ours["LEOFLOW_OUTPUT"])
            if problem:
                self._finish(pb.ATTEMPT_OUTCOME_FAILED, 0, "", problem)
            else:
                self._finish(pb.ATTEMPT_OUTCOME_SUCCESS, 0, "", "", output)
        else:
            output, _ = self._read_output(ours["LEOFLOW_OUTPUT"])  # a failed try keeps a good output
            self._finish(pb.ATTEMPT_OUTCOME_FAILED, exit_code, sig,
                         f"exit code {code}" if code > 0 else f"killed by {sig}", output)

    def _read_output(self, path: str) -> tuple[Optional[str], str]:
        """The task's output (JSON text, or None when it wrote none) and why it is refused, if it is."""
        a = self.assign
        limit = a.output_max_bytes or 64 * 1024
        task = a.task_id
        try:
            size = os.path.getsize(path)
            data = b"" if size > limit else open(path, "rb").read()
        except OSError:
            size, data = 0, b""
        if size > limit:
            return None, (f'output of task "{task}" is too big: {size} bytes, the limit is {limit} bytes '
                          "(--max-output-size); nothing stored")
        if not data.strip():
            return None, f'task "{task}" wrote no output to LEOFLOW_OUTPUT' if a.output_required else ""
        try:
            text = data.decode("utf-8")
            json.loads(text)
        except ValueError as e:
            return None, f'output of task "{task}" is not JSON: {e}; nothing stored'
        return text, ""

    def _pump(self, pipe: IO[bytes], stream: str) -> None:
        """Turns one output pipe into Log messages, numbering lines per attempt from 1."""
        for raw in iter(pipe.readline, b""):
            # The protocol's rule: UTF-8 with U+FFFD for bad bytes; split at \n, one \r before it cut.
            raw = raw[:-1] if raw.endswith(b"\n") else raw
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            line = raw.decode("utf-8", errors="replace")
            with self.lock:
                self.unsent.append(pb.LogEntry(seq=self.next_seq, stream=stream, line=line))
                self.next_seq += 1
                self._flush_logs()
        pipe.close()

    def _flush_logs(self) -> None:
        """Sends the lines not yet sent (call with self.lock held)."""
        if self.unsent and self.stop_reason != "superseded" and self.agent.send(
                pb.ConnectRequest(log=pb.Log(attempt=self.ref, entries=self.unsent))):
            self.unacked.extend(self.unsent)
            self.unsent = []

    def log_acked(self, last_seq: int) -> None:
        """LogAck: the lines up to last_seq are stored; forget them."""
        with self.lock:
            self.unacked = [e for e in self.unacked if e.seq > last_seq]

    def _finish(self, outcome: int, exit_code: Optional[int], sig: str, error: str,
                output: Optional[str] = None) -> None:
        """Records the result and reports it; it is resent after a reconnect until FinishedAck."""
        f = pb.Finished(attempt=self.ref, outcome=outcome, signal=sig, error=error)
        if exit_code is not None:
            f.exit_code = exit_code
        if output is not None:
            f.output = output
        log.info("%s: %s %s", self.name, pb.AttemptOutcome.Name(outcome), error or "")
        with self.lock:
            self._flush_logs()
            self.finished = f
            self.agent.send(pb.ConnectRequest(finished=f))

    def resume(self, stored_seq: int) -> None:
        """After a reconnect whose Welcome resumed this attempt: send what the old stream lost.

        stored_seq is Welcome.logs_so_far.last_seq: lines up to it are stored, the rest go again.
        """
        with self.lock:
            self.unsent = [e for e in self.unacked + self.unsent if e.seq > stored_seq]
            self.unacked = []
            if self.proc and not self.started_sent:
                self.started_sent = self.agent.send(pb.ConnectRequest(
                    started=pb.Started(attempt=self.ref, pid=self.proc.pid)))
            self._flush_logs()
            if self.finished:
                self.agent.send(pb.ConnectRequest(finished=self.finished))

    def stop(self, reason: str, error: str = "") -> None:
        """SIGTERM the process group, SIGKILL it after the grace period (in a helper thread)."""
        if self.stop_reason is None or self.stop_reason == reason:
            self.stop_reason, self.error = reason, error
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        log.info("%s: stopping (%s)", self.name, error or reason)
        # The control plane's grace wins: it fails the attempt once that grace is over.
        a = self.assign
        grace = a.kill_grace.ToMilliseconds() / 1000 if a.HasField("kill_grace") else self.agent.kill_grace

        def kill() -> None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    return
                try:
                    proc.wait(timeout=grace)
                    return
                except subprocess.TimeoutExpired:
                    pass
        threading.Thread(target=kill, daemon=True).start()


def host_ports(urls: Iterable[str]) -> list[str]:
    """The host:port of each plain http:// URL the control plane names (this agent speaks no TLS)."""
    out: list[str] = []
    for u in urls:
        p = urllib.parse.urlsplit(u)
        if p.scheme == "http" and p.netloc and p.netloc not in out:
            out.append(p.netloc)
    return out


class Agent:
    """The connection loop: one Connect stream at a time, reconnecting until told to exit."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.kill_grace: float = args.kill_grace
        self.attempts: dict[str, Attempt] = {}  # by attempt_token, until FinishedAck
        self.lock = threading.Lock()
        self.out: Optional["queue.Queue[object]"] = None  # the live stream's queue, once welcomed
        self.draining = False
        self.acked = 0
        self.last_ack = time.monotonic()
        self.exit_code: Optional[int] = None
        self.call: Optional[grpc.Future] = None
        self.wake = threading.Event()
        self.backoff = Backoff()
        # Addresses the control plane told: every live replica (Welcome), where to go (Reconnect).
        self.learned: list[str] = []
        self.go_to: list[str] = []

    def addresses(self) -> list[str]:
        """The given addresses, then those learned (an agent given one address follows the replicas)."""
        return [*self.args.servers, *[a for a in self.learned if a not in self.args.servers]]

    def send(self, msg: pb.ConnectRequest) -> bool:
        """Queues a message on the live stream; False when there is none (it is kept for later)."""
        with self.lock:
            if self.out is None:
                return False
            self.out.put(msg)
            return True

    def held(self) -> list[pb.AttemptRef]:
        with self.lock:
            return [a.ref for a in self.attempts.values()]

    def run(self) -> int:
        """Connects to each address in turn, reconnecting with backoff (or at once when told to)."""
        address = self.args.servers[0]  # where the next stream goes
        told_to_go = 0  # Reconnects followed at once, in a row
        while self.exit_code is None:
            began = time.monotonic()
            self.go_to = []
            with grpc.insecure_channel(address, options=CHANNEL_OPTIONS) as channel:
                welcomed, reconnect = self.session(agent_pb2_grpc.AgentServiceStub(channel), address)
            if self.exit_code is not None:
                break
            # Any replica serves agents. Told to go: where the control plane said; else the next
            # address, so one that is down costs a single try.
            servers = self.addresses()
            there = [a for a in self.go_to if a != address and a in servers]
            if reconnect and there:
                address = there[0]
            else:
                address = servers[(servers.index(address) + 1) % len(servers)] if address in servers else servers[0]
            # A stream that lasted proves the way works; one that broke at once does not, so a
            # replica that fails every stream just after Welcome still gets growing delays.
            if welcomed and time.monotonic() - began >= self.backoff.limit:
                self.backoff.reset()
                told_to_go = 0
            # Told to go (the replica is stopping): at once, elsewhere. Once per address in a row at
            # most: replicas that all say so at once get the backoff.
            if reconnect and told_to_go < len(servers):
                told_to_go += 1
                log.info("reconnecting to %s now (%d attempts held)", address, len(self.held()))
                continue
            delay = self.backoff.next()
            log.info("reconnecting to %s in %.2fs", address, delay)
            self.wake.wait(delay)
        return self.exit_code

    def session(self, stub: agent_pb2_grpc.AgentServiceStub, address: str) -> tuple[bool, bool]:
        """One stream: Hello, Welcome, then messages until it ends.

        Returns (welcomed, told to reconnect elsewhere).
        """
        q: "queue.Queue[object]" = queue.Queue()
        hello = pb.Hello(protocol_version=self.args.protocol_version, agent_id=self.args.id,
                         labels=self.args.labels,
                         # This agent reads Assign.secret_env (resolve_secrets): it says so, or it
                         # would never be given a task with secret variables.
                         capabilities=[*self.args.capabilities, "leoflow.secret-env"],
                         slots=self.args.slots, token=self.args.token, held=self.held(),
                         incarnation_id=INCARNATION_ID)

        def requests() -> Iterator[pb.ConnectRequest]:
            yield pb.ConnectRequest(hello=hello)
            while (m := q.get()) is not _STOP:
                yield m  # type: ignore[misc]

        log.info("connecting to %s", address)
        call = stub.Connect(requests())
        self.call = call
        stop_ka = threading.Event()
        welcomed = False
        reconnect = False
        no_welcome = threading.Timer(WELCOME_TIMEOUT, call.cancel)
        no_welcome.daemon = True
        no_welcome.start()
        try:
            for resp in call:
                kind = resp.WhichOneof("msg")
                if kind == "welcome":
                    welcomed = True
                    no_welcome.cancel()
                    self.learned = host_ports(resp.welcome.replica_urls)
                    self.on_welcome(resp.welcome, q, call, stop_ka, address)
                elif not welcomed:
                    log.warning("ignoring %s before Welcome", kind)
                elif kind == "assign":
                    self.on_assign(resp.assign)
                elif kind == "cancel":
                    a = self.find(resp.cancel.attempt)
                    if a and not a.finished:
                        a.stop("cancel", f"cancelled: {resp.cancel.reason or 'by the control plane'}")
                elif kind == "drain" and resp.drain.undrain:
                    log.info("undrained: %s", resp.drain.reason or "(no reason)")
                    self.draining = False
                elif kind == "drain":
                    log.info("drain: %s", resp.drain.reason or "(no reason)")
                    self.draining = True
                    self.maybe_exit()
                elif kind == "log_ack":
                    a = self.find(resp.log_ack.attempt)
                    if a:
                        a.log_acked(resp.log_ack.last_seq)
                elif kind == "keepalive_ack":
                    self.last_ack = time.monotonic()
                elif kind == "finished_ack":
                    self.on_finished_ack(resp.finished_ack)
                elif kind == "reconnect" and not reconnect:
                    log.info("told to reconnect elsewhere: %s", resp.reconnect.reason)
                    reconnect = True
                    self.go_to = host_ports(resp.reconnect.replica_urls)
                    self.learned += [a for a in self.go_to if a not in self.learned]
                    self.leave(q, call, stop_ka)
                if self.exit_code is not None:
                    break
            else:
                if not reconnect:
                    log.warning("the control plane closed the stream")
        except grpc.RpcError as e:
            if self.exit_code is None and not welcomed and e.code() in FATAL_AT_HELLO:
                print(f"leoflow-agent: refused by the control plane: {e.details()}", file=sys.stderr)
                self.exit_code = 2
            elif self.exit_code is None and not reconnect:
                # Cancelled here, before Welcome, only by the Welcome timeout.
                why = (f"no Welcome within {WELCOME_TIMEOUT:.0f}s"
                       if not welcomed and e.code() == grpc.StatusCode.CANCELLED else e.details())
                log.warning("stream error from %s: %s %s", address, e.code().name, why)
        finally:
            no_welcome.cancel()
            stop_ka.set()
            with self.lock:
                self.out = None
            q.put(_STOP)
            call.cancel()
        return welcomed, reconnect

    def leave(self, q: "queue.Queue[object]", call: grpc.Future, stop_ka: threading.Event) -> None:
        """Ends a stream politely after Reconnect: the replica still takes what was written before.

        Reports from now on wait for the next stream, as while disconnected: there, after Welcome,
        those of the resumed attempts are sent. The control plane ends its side once it has read
        the end of ours; the stream is cancelled if it has not within a second.
        """
        with self.lock:
            self.out = None
        stop_ka.set()
        q.put(_STOP)
        timer = threading.Timer(1.0, call.cancel)
        timer.daemon = True
        timer.start()

    def on_welcome(self, w: pb.Welcome, q: "queue.Queue[object]", call: grpc.Future,
                   stop_ka: threading.Event, address: str) -> None:
        """Stops superseded attempts, opens the stream to reports, resends what resumed ones lost."""
        interval = w.keepalive_interval.ToMilliseconds() / 1000 or 5.0
        # Back well within the heartbeat threshold after a break, or the attempts are declared lost.
        if w.HasField("max_reconnect_backoff"):
            self.backoff.bound(w.max_reconnect_backoff.ToMilliseconds() / 1000)
        log.info("welcomed by replica %s at %s (keepalive every %.1fs, reconnect backoff at most %.2fs)",
                 w.replica_id, address, interval, self.backoff.limit)
        resumed = {r.attempt_token for r in w.resumed}
        with self.lock:
            gone = [a for t, a in self.attempts.items() if t not in resumed]
            for a in gone:
                del self.attempts[a.ref.attempt_token]
            self.out = q
        for a in gone:
            a.stop("superseded")
        stored = {so.attempt.attempt_token: so.last_seq for so in w.logs_so_far}
        for a in list(self.attempts.values()):
            a.resume(stored.get(a.ref.attempt_token, 0))
        self.last_ack = time.monotonic()
        threading.Thread(target=self.keepalive, args=(q, call, interval, stop_ka), daemon=True).start()

    def keepalive(self, q: "queue.Queue[object]", call: grpc.Future, interval: float,
                  stop: threading.Event) -> None:
        """Sends Keepalive every interval; cancels a stream that stopped acknowledging them."""
        seq = 0
        while not stop.wait(interval):
            if time.monotonic() - self.last_ack > 3 * interval:
                log.warning("no KeepaliveAck for %.1fs: the stream is deaf, reconnecting", 3 * interval)
                call.cancel()
                return
            seq += 1
            q.put(pb.ConnectRequest(keepalive=pb.Keepalive(seq=seq, held=self.held())))

    def on_assign(self, assign: pb.Assign) -> None:
        """Starts an attempt in its own thread (or refuses it while draining)."""
        if self.find(assign.attempt):
            return  # already held (a repeat after a reconnect)
        a = Attempt(self, assign)
        with self.lock:
            self.attempts[a.ref.attempt_token] = a
        if self.draining:
            a._finish(pb.ATTEMPT_OUTCOME_SPAWN_FAILED, None, "", "agent is draining")
            return
        threading.Thread(target=a.run, name=a.name, daemon=True).start()

    def on_finished_ack(self, ack: pb.FinishedAck) -> None:
        """The result is recorded (or refused as superseded): forget the attempt."""
        with self.lock:
            a = self.attempts.pop(ack.attempt.attempt_token, None)
        if a is None:
            return
        self.acked += 1
        if ack.refused:
            log.error("%s: result refused as invalid (a bug in this agent): %s", a.name, ack.refused)
        else:
            log.info("%s: result %s", a.name, "recorded" if ack.applied else "refused (superseded, or another end came first)")
        self.maybe_exit()

    def find(self, ref: pb.AttemptRef) -> Optional[Attempt]:
        with self.lock:
            return self.attempts.get(ref.attempt_token)

    def maybe_exit(self) -> None:
        """Exits (status 0) when idle after --max-tasks results, or drained with --exit-when-drained."""
        with self.lock:
            idle = not self.attempts
        max_tasks = self.args.max_tasks
        if idle and ((max_tasks and self.acked >= max_tasks) or (self.draining and self.args.exit_when_drained)):
            log.info("done: %d results acknowledged", self.acked)
            self.exit_code = 0

    def on_signal(self, signum: int, _frame: object) -> None:
        """First SIGINT/SIGTERM: finish what is held, then exit. Second: kill it all and exit."""
        if self.draining and self.args.exit_when_drained:
            for a in list(self.attempts.values()):
                if a.proc and a.proc.poll() is None:
                    os.killpg(a.proc.pid, signal.SIGKILL)
            self.exit_code = 128 + signum
        else:
            log.info("%s: finishing held attempts, then exiting", signal.Signals(signum).name)
            self.draining = self.args.exit_when_drained = True
            self.maybe_exit()
        if self.exit_code is not None:
            self.wake.set()
            if self.call:
                self.call.cancel()


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="A Leoflow agent: runs task attempts for the control plane.")
    p.add_argument("--server", action="append", metavar="HOST:PORT",
                   help="a control-plane replica; repeat it or separate addresses with commas to give "
                        "several, tried in turn (default 127.0.0.1:7070, or LEOFLOW_SERVER)")
    p.add_argument("--id", default=re.sub(r"[^A-Za-z0-9_.:-]", "-", f"py-{socket.gethostname()}"),
                   help="agent id, unique in the fleet (default py-HOSTNAME)")
    p.add_argument("--labels", default="", help="placement labels, k=v,k2=v2")
    p.add_argument("--capabilities", default="", help="placement capabilities, a,b")
    p.add_argument("--slots", type=int, default=1, help="attempts run at once (default 1)")
    p.add_argument("--token", default=os.environ.get("LEOFLOW_AGENT_TOKEN", ""),
                   help="shared secret, if the control plane requires one (or LEOFLOW_AGENT_TOKEN)")
    p.add_argument("--kill-grace", type=float, default=5.0,
                   help="seconds between SIGTERM and SIGKILL, when the control plane sends no Assign.kill_grace")
    p.add_argument("--max-tasks", type=int, default=0, help="exit 0 once N results were acknowledged")
    p.add_argument("--exit-when-drained", action="store_true", help="exit 0 when drained and idle")
    p.add_argument("--protocol-version", type=int, default=pb.PROTOCOL_VERSION_2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    try:
        args.servers = parse_servers(args.server or [os.environ.get("LEOFLOW_SERVER", "127.0.0.1:7070")])
    except ValueError as e:
        p.error(f"--server: {e}")
    if args.slots < 1:
        p.error("--slots must be at least 1")
    try:
        args.labels = dict(kv.split("=", 1) for kv in args.labels.split(",") if kv)
    except ValueError:
        p.error(f"--labels: expected k=v,k2=v2, got {args.labels!r}")
    args.capabilities = [c for c in args.capabilities.split(",") if c]
    return args


def parse_servers(raw: list[str]) -> list[str]:
    """`--server a:7070 --server b:7070` or `--server a:7070,b:7070` → ['a:7070', 'b:7070'].

    An http:// prefix is dropped (this agent speaks plaintext gRPC). The error names the bad
    address, and its place when there are several.
    """
    items = [item.strip() for r in raw for item in r.split(",")]
    if len(items) > MAX_SERVERS:
        raise ValueError(f"at most {MAX_SERVERS} addresses, got {len(items)}")
    servers: list[str] = []
    for n, item in enumerate(items, 1):
        where = f"address {n} of {len(items)}: " if len(items) > 1 else ""
        address = re.sub(r"^http://", "", item)
        if not re.fullmatch(r"[^\s/]+:\d+", address):
            raise ValueError(f"{where}expected HOST:PORT, got {item!r}")
        if address in servers:
            raise ValueError(f"{where}{item!r} given twice")
        servers.append(address)
    return servers


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s leoflow-agent {args.id}: %(message)s")
    agent = Agent(args)
    signal.signal(signal.SIGTERM, agent.on_signal)
    signal.signal(signal.SIGINT, agent.on_signal)
    return agent.run()


if __name__ == "__main__":
    sys.exit(main())
