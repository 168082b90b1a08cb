#!/usr/bin/env python3
"""Applies a DAG file, triggers a run of it and waits for the run to end, over WorkflowService.

Prints each task's state as it changes; exits 0 when the run succeeded, 1 otherwise. With API
tokens on (Pro, or Lite off loopback), set LEOFLOW_TOKEN (or --token) to a token of role admin
(ApplyDag needs it; trigger and reads need operator): it is sent as `authorization: Bearer …`.

    PYTHONPATH=/tmp/leoflow-py /usr/bin/python3 trigger_and_wait.py --server 127.0.0.1:7070 \\
        examples/python/python-hello.yaml --logs
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Optional

import grpc
from google.protobuf import json_format
from leoflow.v1 import types_pb2, workflow_pb2 as wf, workflow_pb2_grpc

ENDED = {types_pb2.RUN_STATE_SUCCESS, types_pb2.RUN_STATE_FAILED, types_pb2.RUN_STATE_CANCELLED}


def state_name(enum: object, value: int, prefix: str) -> str:
    return enum.Name(value).removeprefix(prefix).lower()  # type: ignore[attr-defined]


def describe(ti: types_pb2.TaskInstance) -> str:
    """One line per task instance: state, try, exit code, agent, error or pending reason."""
    parts = [f"{ti.task_id:<12} {state_name(types_pb2.TaskState, ti.state, 'TASK_STATE_'):<15}",
             f"try {ti.try_number}/{ti.max_tries}"]
    if ti.HasField("exit_code"):
        parts.append(f"exit {ti.exit_code}")
    if ti.agent_id:
        parts.append(f"agent {ti.agent_id}")
    if ti.error:
        parts.append(f"error: {ti.error}")
    elif ti.pending_reason:
        parts.append(f"({ti.pending_reason})")
    return "  ".join(parts)


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dag_file", help="DAG file (YAML or JSON) to apply, then trigger")
    p.add_argument("--server", default="127.0.0.1:7070", help="control plane host:port")
    p.add_argument("--conf", default="", help="run conf, a JSON object")
    p.add_argument("--timeout", type=float, default=300, help="give up after this many seconds")
    p.add_argument("--logs", action="store_true", help="print the run's log lines at the end")
    p.add_argument("--json-out", help="write the final GetRunResponse as JSON to this file")
    p.add_argument("--token", default=os.environ.get("LEOFLOW_TOKEN", ""),
                   help="API token, sent as a bearer token (or LEOFLOW_TOKEN); none: the API must be open")
    args = p.parse_args(argv)
    # Every call carries the token: the server looks it up per call, so a revoked one stops at once.
    auth = [("authorization", f"Bearer {args.token}")] if args.token else []

    target = re.sub(r"^https?://", "", args.server)
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        api = workflow_pb2_grpc.WorkflowServiceStub(channel)
        with open(args.dag_file, encoding="utf-8") as f:
            applied = api.ApplyDag(wf.ApplyDagRequest(source=f.read(), filename=args.dag_file), timeout=30, metadata=auth)
        dag_id = applied.dag.dag_id
        print(f"dag {dag_id} {applied.outcome} (version {applied.dag.version})", flush=True)
        run = api.TriggerRun(wf.TriggerRunRequest(dag_id=dag_id, conf_json=args.conf), timeout=30, metadata=auth).run
        print(f"run {run.run_id} of {dag_id} triggered (key {run.run_key})", flush=True)

        # The run's events are pushed as they commit (WatchRun): each batch is one GetRun to print
        # what moved, never a read at an interval. A stream cut off (a replica stopping, this
        # reader too slow) is resumed from the last seq received: nothing missed, nothing twice.
        deadline = time.monotonic() + args.timeout
        seen: dict[str, str] = {}
        after = 0

        def read_all(with_outputs: bool) -> wf.GetRunResponse:
            # GetRun answers pages (a 100,000-item map takes a few): follow next_page_token.
            got = api.GetRun(wf.GetRunRequest(run_id=run.run_id, with_outputs=with_outputs), timeout=30, metadata=auth)
            token = got.next_page_token
            while token:
                page = api.GetRun(wf.GetRunRequest(run_id=run.run_id, with_outputs=with_outputs, page_token=token),
                                  timeout=30, metadata=auth)
                got.task_instances.extend(page.task_instances)
                token = page.next_page_token
            got.next_page_token = ""
            return got

        def show() -> wf.GetRunResponse:
            # The first page holds the run's own task instances (a mapped task's counts its items).
            got = api.GetRun(wf.GetRunRequest(run_id=run.run_id), timeout=30, metadata=auth)
            for ti in got.task_instances:
                line = describe(ti)
                if seen.get(ti.task_id) != line:
                    seen[ti.task_id] = line
                    print(f"  {line}", flush=True)
            return got

        while True:
            remaining = deadline - time.monotonic()
            try:
                for batch in api.WatchRun(wf.WatchRunRequest(run_id=run.run_id, after_seq=after),
                                          timeout=max(remaining, 0.1), metadata=auth):
                    if batch.events:
                        after = batch.events[-1].seq
                        show()
                break
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                    got = show()
                    print(f"run {run.run_id}: still {state_name(types_pb2.RunState, got.run.state, 'RUN_STATE_')}"
                          f" after {args.timeout:g}s, giving up", file=sys.stderr)
                    return 1
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                    raise
                time.sleep(0.2)
        got = show()
        # The end, with each task's output (bounded; a big one is left out: read it with GetTaskOutput).
        got = read_all(with_outputs=True)
        for ti in got.task_instances:
            if ti.output_json:
                print(f"  output of {ti.task_id}: {ti.output_json}", flush=True)
            elif ti.output_omitted:
                print(f"  output of {ti.task_id}: {ti.output_size_bytes} bytes (GetTaskOutput reads it)", flush=True)

        if args.logs:
            for batch in api.TailLogs(wf.TailLogsRequest(run_id=run.run_id), timeout=30, metadata=auth):
                for ln in batch.lines:
                    print(f"[{ln.task_id} #{ln.try_number} {ln.stream}] {ln.line}")
        if args.json_out:
            with open(args.json_out, "w", encoding="utf-8") as f:
                json.dump(json_format.MessageToDict(got, preserving_proto_field_name=True), f, indent=2)
        state = state_name(types_pb2.RunState, got.run.state, "RUN_STATE_")
        print(f"run {run.run_id} {state}", flush=True)
        return 0 if got.run.state == types_pb2.RUN_STATE_SUCCESS else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except grpc.RpcError as e:
        print(f"trigger_and_wait: {e.code().name}: {e.details()}", file=sys.stderr)
        sys.exit(1)
