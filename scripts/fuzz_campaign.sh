#!/usr/bin/env bash
# A fuzzing campaign apart from CI (docs/fuzzing.md): every harness for SECONDS
# (default 3600) through scripts/fuzz.sh, from the corpora carried in the
# repository; then each harness's corpus (carried + found + seeds) minimised
# with libFuzzer's -merge=1 and packed back into fuzz/corpus/<harness>.tar.xz,
# and the campaign's figures appended to fuzz/corpus/campaigns.tsv. Commit both:
# the next campaign, on any machine, goes on from there.
#
#   scripts/fuzz_campaign.sh [SECONDS [HARNESS...]]   (default: the five native harnesses;
#                                                      serve_request, the Python one, where named)
#   scripts/fuzz_campaign.sh --merge-only SECONDS [HARNESS...]   (the runs are done: merge, pack, record)
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
harnesses=(dnn_load onnx_import tflite_import npy_read cache_read)
if [ "${1:-}" = "--merge-only" ]; then
  seconds="$2"
  [ $# -gt 2 ] && harnesses=("${@:3}")
else
  seconds="${1:-3600}"
  [ $# -gt 1 ] && harnesses=("${@:2}")
  ./scripts/fuzz.sh "$seconds" "${harnesses[@]}" || status=$?
fi
mkdir -p fuzz/corpus
stats=fuzz/corpus/campaigns.tsv
[ -f "$stats" ] || printf 'date\tmachine\tharness\tseconds\texecutions\texec_per_s\tcoverage_edges\tfeatures\tcorpus_inputs\n' > "$stats"
machine="$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)"
for h in "${harnesses[@]}"; do
  log="build-fuzz/fuzz_$h.log"
  [ -f "$log" ] || continue
  max_len=65536
  [ "$h" = cache_read ] && max_len=4096
  merged="build-fuzz/merged/$h"
  rm -rf "$merged"
  mkdir -p "$merged"
  ASAN_OPTIONS=detect_leaks=0 SOFTNEURO_LOG=error OMP_NUM_THREADS=1 ONEDNN_PRIMITIVE_CACHE_CAPACITY=16 \
    "./build-fuzz/fuzz/fuzz_$h" -merge=1 "$merged" "build-fuzz/corpus/$h" "build-fuzz/carried/$h" "build-fuzz/seeds/$h" \
    -max_len="$max_len" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=30 > "build-fuzz/merge_$h.log" 2>&1
  tar -cJf "fuzz/corpus/$h.tar.xz.tmp" -C build-fuzz/merged "$h" && mv "fuzz/corpus/$h.tar.xz.tmp" "fuzz/corpus/$h.tar.xz"
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -n 1)"
  rate="$(sed -n 's/.*exec\/s: \([0-9]*\).*/\1/p' <<< "$done_line")"
  cov="$(sed -n 's/.*cov: \([0-9]*\).*/\1/p' <<< "$done_line")"
  ft="$(sed -n 's/.*ft: \([0-9]*\).*/\1/p' <<< "$done_line")"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%F)" "$machine" "$h" "$seconds" "${runs:-0}" "${rate:-0}" \
    "${cov:-0}" "${ft:-0}" "$(ls "$merged" | wc -l)" >> "$stats"
done
awk -F'\t' 'NR > 1 {runs[$3] += $5} END {for (h in runs) printf "%s: %d executions to date\n", h, runs[h]}' "$stats"
exit "$status"
