#!/bin/bash
# The CUDA backend on a lent GPU (issue 56), in one call of the device tool:
#   bench/gpu/pack.sh                                  # here: build/ packed into .devpack/
#   device run (carry .devpack): bench/gpu/device_check.sh [STEPS]
# STEPS (comma-separated; default tests,eager,tune,bench,compile):
#   tests    softneuro_cuda_tests (every CUDA routine against cpu/ref, the generator, sessions at once)
#   eager    torch_peers.py: torchvision's ResNet50 and MobileNetV2 exported, PyTorch eager timed
#   tune     import, hybrid tune (cpu:float32:*,cuda:float32,cuda:float16) and run each model and batch
#   bench    softneuro bench --sessions 4 of the batch-1 tuned nets (outputs identical across sessions)
#   compile  torch_peers.py: torch.compile timed (last: the slowest step; COMPILE_MODES, default compile;
#            compile-graphs: reduce-overhead)
#   cuda_bench  cuDNN algorithms per convolution, graphs against eager runs
# Environment: TUNES (NAME=MODEL.bBATCH@SCHEMAS ...; default the three models at batch 1 over
# cpu:float32:*,cuda:float32,cuda:float16 and ResNet50/MobileNetV2 at batch 8 over B8_SCHEMAS,
# default cuda:*), TUNE_BUDGET (s per tune, 60), DEADLINE (s; steps that would start later are
# skipped, default 560), PEER_MODELS (torch_peers.py's --models: resnet50,mobilenet_v2[,bert]; a model named
# bert is BERT-base at sequence 128), SKIP_EAGER_RUN (set: no run without CUDA graphs).
# Logs go to $OUT (summary.txt and logs.tgz: the device tool brings back 8 files at most).
set -u
OUT=${OUT:-/tmp/gpu-out}
steps=",${1:-tests,eager,tune,bench,compile},"
has() { [[ $steps == *",$1,"* ]]; }
start=$SECONDS deadline=${DEADLINE:-560}
time_for() { (( SECONDS - start + $1 < deadline )) || { note "skipped $2: $((SECONDS - start)) s used of $deadline"; false; }; }
D=/tmp/devpack W=/tmp/devwork
mkdir -p "$OUT" $D $W
tar -xJf .devpack/pack.tar.xz -C $D || exit 1
nv=$(python3 -c 'import nvidia; print(list(nvidia.__path__)[0])' 2>/dev/null)
libdirs=$(find -H ${nv:+"$nv"} /usr/local/cuda/lib64 \( -name 'libcublas*.so*' -o -name 'libcudnn*.so*' -o -name 'libnvrtc*.so*' \) -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
export LD_LIBRARY_PATH=$D/lib:$libdirs${LD_LIBRARY_PATH:-}
export OMP_WAIT_POLICY=passive
sn=$D/bin/softneuro
summary=$OUT/summary.txt
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
note "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader); cpus $(nproc)"
SOFTNEURO_LOG=info $sn routines dense 2>&1 | grep -m1 'CUDA backend' | tee -a "$summary"

if has tests; then
  timeout 120 $D/bin/softneuro_cuda_tests --durations yes > "$OUT/cuda_tests.log" 2>&1
  note "softneuro_cuda_tests rc $?: $(grep -a -E '^(test cases|assertions|All tests)' "$OUT/cuda_tests.log" | tr '\n' ' ')"
  grep -a -A6 'FAILED' "$OUT/cuda_tests.log" | head -60 | tee -a "$summary"
  grep -a -E 'runs compared|^[0-9.]+ s: ' "$OUT/cuda_tests.log" | tee -a "$summary"
fi

python3 - <<PY
import numpy as np
rng = np.random.default_rng(0)
for b in (1, 8):
    np.save("$W/img_b%d.npy" % b, rng.standard_normal((b, 3, 224, 224), dtype=np.float32))
    np.save("$W/line_b%d.npy" % b, rng.standard_normal((b, 3, 48, 320), dtype=np.float32))
    np.save("$W/ids_b%d.npy" % b, rng.integers(0, 30522, size=(b, 128), dtype=np.int64))
    np.save("$W/mask_b%d.npy" % b, np.ones((b, 128), dtype=np.int64))
    # Samples for the accuracy budget of float16 paths (tune --calibration): inputs like the runs'.
    import os
    for kind in ("img", "line", "bert"):
        os.makedirs("$W/cal_%s_b%d" % (kind, b), exist_ok=True)
    for k in range(4):
        np.save("$W/cal_img_b%d/%d.npy" % (b, k), rng.standard_normal((b, 3, 224, 224), dtype=np.float32))
        np.save("$W/cal_line_b%d/%d.npy" % (b, k), rng.standard_normal((b, 3, 48, 320), dtype=np.float32))
        np.savez("$W/cal_bert_b%d/%d.npz" % (b, k), input_ids=rng.integers(0, 30522, size=(b, 128), dtype=np.int64),
                 attention_mask=np.ones((b, 128), dtype=np.int64))
PY
cp $D/models/ch_PP-OCRv4_rec_infer.onnx $W/rec.onnx
# Exports the torchvision models (and times eager PyTorch with "eager").
modes=none; has eager && modes=eager
PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu/torch_peers.py --export $W --modes $modes --models ${PEER_MODELS:-resnet50,mobilenet_v2} \
  --json "$OUT/torch_eager.json" > "$OUT/torch_eager.log" 2>&1
note "torch_peers $modes rc $?"; grep '^{' "$OUT/torch_eager.log" | tee -a "$summary"

hybrid='cpu:float32:*,cuda:float32,cuda:float16'
# NAME=MODEL.bBATCH@SCHEMAS, run in order; NAME names the files.
default_tunes="resnet50.b1=resnet50.b1@$hybrid mobilenet_v2.b1=mobilenet_v2.b1@$hybrid rec.b1=rec.b1@$hybrid
  resnet50.b8=resnet50.b8@${B8_SCHEMAS:-cuda:*} mobilenet_v2.b8=mobilenet_v2.b8@${B8_SCHEMAS:-cuda:*}"
if has tune; then
  set -f  # the schemas' * are no file patterns
  for entry in ${TUNES:-$default_tunes}; do
    t=${entry%%=*} spec=${entry#*=}
    m=${spec%%.b*} rest=${spec#*.b}; b=${rest%%@*} schemas=${rest#*@}
    time_for 60 "tune $t" || continue
    if [ $m = rec ]; then shapes="--input-shape x=${b}x3x48x320"; feeds="--input x=$W/line_b$b.npy"; cal=$W/cal_line_b$b
    elif [ $m = bert ]; then shapes="--input-shape input_ids=${b}x128 --input-shape attention_mask=${b}x128"
      feeds="--input input_ids=$W/ids_b$b.npy --input attention_mask=$W/mask_b$b.npy"; cal=$W/cal_bert_b$b
    else shapes="--input-shape input=${b}x3x224x224"; feeds="--input input=$W/img_b$b.npy"; cal=$W/cal_img_b$b; fi
    $sn import $W/$m.onnx -o $W/$t.dnn $shapes > "$OUT/$t.log" 2>&1 || { note "$t import failed: $(tail -2 "$OUT/$t.log")"; continue; }
    graphs=; [[ $t == *.nographs ]] && graphs=SOFTNEURO_CUDA_GRAPHS=0  # a NAME ending .nographs tunes without CUDA graphs
    timeout ${TUNE_TIMEOUT:-120} env $graphs $sn tune $W/$t.dnn -o $W/$t.tuned.dnn --schemas "$schemas" --cache - --unit-budget-ms 5 --calibration $cal \
      --time-budget ${TUNE_BUDGET:-60} --json "$OUT/$t.tune.json" >> "$OUT/$t.log" 2>&1
    note "$t tune ($schemas) rc $?: $(grep -E '^(predicted|tuned in)' "$OUT/$t.log" | tr '\n' ' ') $(grep '^tune:' "$OUT/$t.log" | tail -2 | tr '\n' ' ')"
    timeout 60 $sn run $W/$t.tuned.dnn $feeds --repeat 200 > "$OUT/$t.run.log" 2>&1
    note "$t run rc $?: $(grep -E '^latency' "$OUT/$t.run.log")"
    if [ -z "${SKIP_EAGER_RUN:-}" ]; then
      SOFTNEURO_CUDA_GRAPHS=0 timeout 60 $sn run $W/$t.tuned.dnn $feeds --repeat 200 > "$OUT/$t.eager.log" 2>&1
      note "$t run, no CUDA graphs (SOFTNEURO_CUDA_GRAPHS=0) rc $?: $(grep -E '^latency' "$OUT/$t.eager.log")"
    fi
    awk 'NF >= 5 && $3 ~ /^(cuda|cpu)/ {print $3}' "$OUT/$t.log" | sort | uniq -c | sort -rn | head -8 | tr -s ' \n' ' ' | sed 's/^/  path:/' | tee -a "$summary"; echo | tee -a "$summary"
    grep -E '^[0-9]+ adapts' "$OUT/$t.log" | tee -a "$summary"
  done
  set +f
fi
if has bench; then
  for t in resnet50.b1 rec.b1; do
    [ -f $W/$t.tuned.dnn ] && time_for 20 "bench $t" || continue
    timeout 60 $sn bench $W/$t.tuned.dnn --sessions 4 --runs 50 > "$OUT/$t.bench4.log" 2>&1
    note "$t bench --sessions 4 rc $?: $(grep -E 'latency|outputs' "$OUT/$t.bench4.log" | tr '\n' ' ')"
  done
fi
if has compile && time_for 75 "torch.compile"; then
  PYTHONUNBUFFERED=1 timeout $((deadline - (SECONDS - start) - 10)) python3 bench/gpu/torch_peers.py --export $W \
    --modes ${COMPILE_MODES:-compile} --models ${PEER_MODELS:-resnet50,mobilenet_v2} \
    --json "$OUT/torch_compile.json" > "$OUT/torch_compile.log" 2>&1
  note "torch_peers compile rc $?"; grep '^{' "$OUT/torch_compile.log" | tee -a "$summary"
fi
if has cuda_bench && [ -f $W/resnet50.b1.dnn ] && time_for 60 cuda_bench; then
  timeout 120 $D/bin/cuda_bench $W/resnet50.b1.dnn > "$OUT/cuda_bench.log" 2>&1
  note "cuda_bench rc $?"; tail -8 "$OUT/cuda_bench.log" | tee -a "$summary"
fi
note "done in $((SECONDS - start)) s"
(cd "$OUT" && tar czf logs.tgz --remove-files $(ls | grep -v -e '^summary.txt$' -e '^logs.tgz$'))
