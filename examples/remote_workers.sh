#!/bin/sh
# A heterogeneous setup on one machine: one trainer and two CPU data workers on loopback, with a
# shared token. The workers build every batch (the trainer's own loader threads only step in if
# both go away); the run is bit-identical to a local one. On real hosts, start the workers on the
# CPU machines with --listen on their own address and list those addresses in data.remote.workers.
# Usage: examples/remote_workers.sh [BUILD_DIR]
set -eu
loom="${1:-build}/bin/loom"
work=runs/remote-workers
mkdir -p "$work"
"$loom" data synth-images "$work/images" --count 512 --classes 8 --width 160 --height 120

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$work/token"
"$loom" data-worker --listen 127.0.0.1:0 --port-file "$work/port1" --data-root "$work" \
  --threads 1 --token-file "$work/token" --report-every 5 2> "$work/worker1.log" &
w1=$!
"$loom" data-worker --listen 127.0.0.1:0 --port-file "$work/port2" --data-root "$work" \
  --threads 1 --token-file "$work/token" --report-every 5 2> "$work/worker2.log" &
w2=$!
trap 'kill $w1 $w2 2>/dev/null || true' EXIT
while [ ! -s "$work/port1" ] || [ ! -s "$work/port2" ]; do sleep 0.1; done

"$loom" train --out "$work/run" --set data=image_folder --set data.path="$work/images" \
  --set data.image_size=96 --set data.batch_size=32 --set model=resnet18 --set train.epochs=1 \
  --set train.eval=false \
  --set data.remote.workers="127.0.0.1:$(cat "$work/port1"),127.0.0.1:$(cat "$work/port2")" \
  --set data.remote.token_file="$work/token" --set data.remote.local_threads=0

echo "--- summary.json, data.remote:"
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['data']['remote'], indent=1))" \
  "$work/run/summary.json"
echo "--- worker logs:"
cat "$work/worker1.log" "$work/worker2.log"
