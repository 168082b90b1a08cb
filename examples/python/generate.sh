#!/usr/bin/env bash
# Generates the Python gRPC stubs for Leoflow's API from proto/ into OUT (a folder you then put
# on PYTHONPATH). The stubs are not committed: make them when you need them.
#
#   examples/python/generate.sh /tmp/leoflow-py
#   PYTHONPATH=/tmp/leoflow-py /usr/bin/python3 examples/python/leoflow_agent.py ...
#
# Needs Debian's python3-grpcio, python3-grpc-tools and protobuf-compiler (use /usr/bin/python3:
# another python3 on PATH may not have them). The protobuf well-known types
# (google/protobuf/duration.proto, …) come with the Python protobuf package.
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 64
fi
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
OUT="$1"
PY="${PYTHON:-/usr/bin/python3}"
mkdir -p "$OUT"
cd "$ROOT"

# The plain way: grpc_tools' own protoc makes both the messages and the service stubs.
if ! "$PY" -m grpc_tools.protoc -I proto --python_out="$OUT" --grpc_python_out="$OUT" proto/leoflow/v1/*.proto 2>"$OUT/.protoc-err"; then
  # Debian 12's grpc_tools (1.14) bundles a protoc older than proto3 `optional` fields
  # (Finished.exit_code uses one). Then: messages from the system protoc (3.21), and the service
  # stubs from grpc_tools' plugin reading a descriptor set the system protoc wrote.
  if ! command -v protoc >/dev/null; then
    cat "$OUT/.protoc-err" >&2
    echo "$0: grpc_tools.protoc failed and no system protoc (apt-get install protobuf-compiler)" >&2
    exit 1
  fi
  protoc -I proto --python_out="$OUT" proto/leoflow/v1/*.proto
  protoc -I proto --include_imports --descriptor_set_out="$OUT/.leoflow.pb" proto/leoflow/v1/*.proto
  # Called through main() rather than `-m`, which would add an -I that --descriptor_set_in forbids.
  files=()
  for f in proto/leoflow/v1/*.proto; do files+=("${f#proto/}"); done
  "$PY" -c 'import sys; from grpc_tools import protoc; sys.exit(protoc.main(sys.argv))' \
    --descriptor_set_in="$OUT/.leoflow.pb" --grpc_python_out="$OUT" "${files[@]}"
  rm -f "$OUT/.leoflow.pb"
fi
rm -f "$OUT/.protoc-err"
touch "$OUT/leoflow/__init__.py" "$OUT/leoflow/v1/__init__.py"
