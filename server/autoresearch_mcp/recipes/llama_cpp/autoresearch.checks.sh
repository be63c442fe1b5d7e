#!/usr/bin/env bash
# autoresearch recipe for llama.cpp: correctness checks that compare the candidate with the baseline.
#
# 1. KL divergence against the baseline. The baseline's llama-perplexity saves its token
#    probabilities on autoresearch.checks.txt (a fixed text, also protected) for each flash-attention
#    setting, into this run's private /tmp (a confined check cannot write the baseline's tree, and a
#    file a candidate could write is no reference), reused from the baseline's build folder only where
#    a trusted run left it there; the candidate's llama-perplexity is compared
#    with them. The candidate fails when the mean KL divergence is above MAX_MEAN_KLD or the share of
#    positions where both pick the same top token is below MIN_SAME_TOP_PCT. A change that only
#    reorders floating-point sums stays far inside both; a broken kernel does not.
# 2. test-backend-ops, only where the build has a second backend to compare the CPU backend with (on
#    a CPU-only build it skips the CPU backend and compares nothing). Build it with
#    LLAMA_CHECK_BACKEND_OPS=1 and a GPU backend in LLAMA_CMAKE_ARGS.
#
# The harness sets AUTORESEARCH_BASELINE_TREE (the baseline's built tree) and AUTORESEARCH_MODEL; a
# cross-built tree runs through $AUTORESEARCH_EMULATOR. This file is protected.
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=build-autoresearch
MAX_MEAN_KLD=0.001
MIN_SAME_TOP_PCT=98
CTX=128
CHUNKS=6
TEXT="$PWD/autoresearch.checks.txt"
read -r -a EMULATOR <<< "${AUTORESEARCH_EMULATOR:-}"

fail() { echo "autoresearch.checks.sh: FAIL: $*" >&2; exit 1; }

BASE="${AUTORESEARCH_BASELINE_TREE:-}"
[ -n "$BASE" ] || fail "AUTORESEARCH_BASELINE_TREE is not set: run the checks through the autoresearch harness"
MODEL="${AUTORESEARCH_MODEL:-}"
[ -f "$MODEL" ] || fail "model not found (AUTORESEARCH_MODEL=${MODEL:-unset}): set \"model\" in .autoresearch/config.json"
[ -f "$TEXT" ] || fail "the fixed text $TEXT is missing"
CAND_PPL="$BUILD_DIR/bin/llama-perplexity"
BASE_PPL="$BASE/$BUILD_DIR/bin/llama-perplexity"
[ -x "$CAND_PPL" ] || fail "$CAND_PPL was not built"
[ -x "$BASE_PPL" ] || fail "the baseline's $BASE_PPL was not built"
THREADS="${AUTORESEARCH_THREADS:-$(nproc)}"
ppl_args=(-m "$MODEL" -c "$CTX" -ngl 0 -t "$THREADS" -b "$CTX")

# The baseline's probabilities for this model, text and setting: kept in the baseline's build folder
# where this run may write it (unconfined, or the head checked as its own baseline), else computed
# into the private /tmp. Written to a temporary name and renamed, so concurrent checks never read a
# half-written file. One chunk more
# than judged: llama-perplexity's logger sometimes loses the lines printed just before it exits, so
# the figures are read at chunk CHUNKS, which the extra chunk's work gives time to reach the output.
base_logits() {
  local fa="$1" key file
  key=$(printf '%s\n' "$(stat -c '%s %Y' "$MODEL")" "$MODEL" "$CTX" "$CHUNKS" "$fa" "${AUTORESEARCH_EMULATOR:-}" \
        | cat - "$TEXT" | sha256sum | cut -c1-16)
  file="$BASE/$BUILD_DIR/autoresearch-kld-$key.bin"
  if [ ! -s "$file" ] && [ ! -w "$BASE/$BUILD_DIR" ]; then
    file="${TMPDIR:-/tmp}/autoresearch-kld-$key.bin"
  fi
  if [ ! -s "$file" ]; then
    local tmp="$file.$$.tmp"
    if ! "${EMULATOR[@]}" "$BASE_PPL" "${ppl_args[@]}" -fa "$fa" -f "$TEXT" --chunks $((CHUNKS + 1)) \
         --kl-divergence-base "$tmp" > "$tmp.log" 2>&1; then
      tail -20 "$tmp.log" >&2
      rm -f "$tmp" "$tmp.log"
      fail "the baseline's llama-perplexity failed to save its probabilities (-fa $fa)"
    fi
    local n
    n=$(sed -n 's/.*calculating perplexity over \([0-9]*\) chunks.*/\1/p' "$tmp.log" | head -1)
    if [ "${n:-0}" -lt $((CHUNKS + 1)) ]; then
      rm -f "$tmp" "$tmp.log"
      fail "the fixed text gives only ${n:-0} chunks of $CTX tokens with this model (need $((CHUNKS + 1)))"
    fi
    mv -f "$tmp" "$file"
    rm -f "$tmp.log"
  fi
  echo "$file"
}

# Mean KLD and same-top-token % over the first CHUNKS chunks, from the per-chunk table (each line
# holds the running figures over all chunks so far; the closing statistics block is not used, as it
# is the part most often lost). Prints "KLD SAME_TOP CHUNKS_SEEN"; figures are "none" when the line
# of chunk CHUNKS is missing.
read_kld() {
  python3 - "$1" "$CHUNKS" <<'PY'
import re, sys
want, seen, figures = int(sys.argv[2]), 0, ("none", "none")
row = re.compile(r"^\s*(\d+)\s+\S+\s+±\s+\S+\s+\S+\s+±\s+\S+\s+(\S+)\s+±\s+\S+\s+\S+\s+±\s+\S+\s*%\s+(\S+)\s+±\s+\S+\s*%")
for line in open(sys.argv[1], errors="replace"):
    m = row.match(line)
    if m:
        seen = max(seen, int(m.group(1)))
        if int(m.group(1)) == want:
            figures = (m.group(2), m.group(3))
print(figures[0], figures[1], seen)
PY
}

kld_check() {
  local fa="$1" base log figures kld top seen attempt
  base=$(base_logits "$fa")
  log=$(mktemp)
  for attempt in 1 2 3; do
    if ! "${EMULATOR[@]}" "$CAND_PPL" "${ppl_args[@]}" -fa "$fa" --kl-divergence-base "$base" --kl-divergence \
         > "$log" 2>&1; then
      tail -20 "$log" >&2
      rm -f "$log"
      fail "the candidate's llama-perplexity crashed or failed (-fa $fa)"
    fi
    read -r kld top seen <<< "$(read_kld "$log")"
    # a run whose output lost lines is measured again; a missing figure is never a pass
    [ "$kld" != none ] && break
  done
  rm -f "$log"
  [ "$kld" != none ] || fail "llama-perplexity reported $seen of $CHUNKS chunks (-fa $fa) in 3 attempts: no figures to judge"
  echo "KL divergence vs baseline (-fa $fa, $CHUNKS chunks of $CTX tokens): mean KLD $kld (limit $MAX_MEAN_KLD), same top token $top% (limit $MIN_SAME_TOP_PCT%)"
  python3 - "$kld" "$top" "$MAX_MEAN_KLD" "$MIN_SAME_TOP_PCT" <<'PY' || fail "the candidate's outputs differ from the baseline's (-fa $fa): mean KLD $kld (limit $MAX_MEAN_KLD), same top token $top% (limit $MIN_SAME_TOP_PCT%)"
import math, sys
kld, top, max_kld, min_top = (float(x) for x in sys.argv[1:])
sys.exit(0 if math.isfinite(kld) and math.isfinite(top) and kld <= max_kld and top >= min_top else 1)
PY
}

for fa in 1 0; do
  kld_check "$fa"
done

OPS="$BUILD_DIR/bin/test-backend-ops"
if [ -x "$OPS" ]; then
  out=$("${EMULATOR[@]}" "$OPS" -o RMS_NORM 2>&1 | head -5 || true)
  if grep -q "Testing 1 devices" <<< "$out"; then
    echo "test-backend-ops: only the CPU backend in this build, nothing to compare it with; skipped"
  else
    "${EMULATOR[@]}" "$OPS" mode test || fail "test-backend-ops found ops whose CPU results differ from another backend"
  fi
fi
echo "autoresearch.checks.sh: passed"
