#!/usr/bin/env bash
# autoresearch recipe for llama.cpp: CPU inference, text generation and prompt processing.
#
#   ./autoresearch.sh build   CPU-only Release build of llama-bench, llama-perplexity and the op benchmark
#   ./autoresearch.sh bench   llama-bench's prompt test and its generation test, each in its own process;
#                             prints METRIC pp_tps=..., pp_tps.cpu=..., tg_tps=... and tg_tps.cpu=... (the
#                             tokens over that process's CPU time); with AUTORESEARCH_FOCUS, first the op
#                             benchmark's METRIC focus.<...> and control.<...>
#
# The model is a GGUF file outside the repository: $AUTORESEARCH_MODEL (the server sets it from
# `model` or `model_url` in .autoresearch/config.json). Settings, each with its default (the session
# records the values it uses in `env` of its config and gives them to every run):
#   AUTORESEARCH_THREADS       threads (set by the harness: start_session takes the steadiest count)
#   AUTORESEARCH_FOCUS         ggml ops a change acts on, in graph order, e.g. RMS_NORM,MUL (set by the
#                              harness for launch_experiment(focus=[...]); `autoresearch-opbench --list`)
#   LLAMA_BENCH_FA=1           flash attention on (the CPU fusions that matter most show only with -fa 1)
#   LLAMA_BENCH_PROMPT=128     prompt tokens of the prompt-processing test (pp_tps); also the rows of the
#                              op benchmark's graphs (64 or more: ggml-cpu's tiled flash attention, the path
#                              the prompt's batch takes; text generation's single query row takes the
#                              one-chunk or split-KV path, so a change to the tiled path shows in pp_tps only)
#   LLAMA_BENCH_GEN=128        generated tokens of the text-generation test (tg_tps)
#   LLAMA_OPBENCH_PROCESSES=1  op benchmark processes per run; each focus and control metric is their median
#   LLAMA_AMX=0                1: keep llama.cpp's AMX kernels in a native build (they crash on some machines)
#   LLAMA_CMAKE_ARGS           extra CMake arguments for the build
#   LLAMA_CHECK_BACKEND_OPS=0  1: also build test-backend-ops (the checks run it where a second backend exists)
# A platform's CMAKE_TOOLCHAIN_FILE is used as given; otherwise a cross compiler in CC (e.g.
# aarch64-linux-gnu-gcc) gets a generated CMake toolchain file. Binaries run through
# $AUTORESEARCH_EMULATOR when it is set (e.g. qemu-aarch64 -L /usr/aarch64-linux-gnu).
# This file is protected: candidates cannot change it.
set -euo pipefail
cd "$(dirname "$0")"
BUILD_DIR=build-autoresearch
read -r -a EMULATOR <<< "${AUTORESEARCH_EMULATOR:-}"

# The target triple of a cross compiler whose architecture differs from this machine's, else empty.
cross_target() {
  local cc="${CC:-}" target host
  [ -n "$cc" ] || return 0
  target=$("$cc" -dumpmachine 2>/dev/null) || return 0
  host=$(uname -m)
  case "${target%%-*}" in
    "$host") ;;
    arm64) [ "$host" = aarch64 ] || echo "$target" ;;
    *) echo "$target" ;;
  esac
}

toolchain_file() {
  local target="$1" file="$BUILD_DIR/autoresearch-toolchain.cmake" sysroot
  sysroot="/usr/$target"
  mkdir -p "$BUILD_DIR"
  {
    echo "set(CMAKE_SYSTEM_NAME Linux)"
    echo "set(CMAKE_SYSTEM_PROCESSOR ${target%%-*})"
    echo "set(CMAKE_C_COMPILER ${CC})"
    echo "set(CMAKE_CXX_COMPILER ${CXX:-${CC%gcc}g++})"
    [ -d "$sysroot" ] && echo "set(CMAKE_FIND_ROOT_PATH $sysroot)"
    echo "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)"
    echo "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)"
    echo "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)"
    [ ${#EMULATOR[@]} -gt 0 ] && echo "set(CMAKE_CROSSCOMPILING_EMULATOR ${EMULATOR[*]})"
  } > "$file"
  echo "$file"
}

# The op micro-benchmark (autoresearch.opbench.cpp) is one more target of the same CMake build, so it
# links the tree's own ggml with the same flags and compiler cache: a candidate's kernel is what it
# times. CMake includes this file after the project() call and defines the target once the whole
# project is configured, where a ggml target exists (it says so in a file the build step reads).
opbench_cmake() {
  local file="$BUILD_DIR/autoresearch-opbench.cmake"
  mkdir -p "$BUILD_DIR"
  cat > "$file" <<CMAKE
include_guard(GLOBAL)
function(autoresearch_opbench)
  if(NOT TARGET ggml)
    message(WARNING "autoresearch: no ggml target in this project; the op benchmark is not built")
    return()
  endif()
  add_executable(autoresearch-opbench "$PWD/autoresearch.opbench.cpp")
  target_link_libraries(autoresearch-opbench PRIVATE ggml)
  target_compile_features(autoresearch-opbench PRIVATE cxx_std_17)
  set_target_properties(autoresearch-opbench PROPERTIES RUNTIME_OUTPUT_DIRECTORY "\${CMAKE_BINARY_DIR}/bin")
  file(WRITE "\${CMAKE_BINARY_DIR}/autoresearch-opbench.target" "autoresearch-opbench")
endfunction()
if(CMAKE_VERSION VERSION_LESS 3.19)
  message(WARNING "autoresearch: CMake 3.19 or newer builds the op benchmark (AUTORESEARCH_FOCUS); this is \${CMAKE_VERSION}")
else()
  cmake_language(DEFER CALL autoresearch_opbench)
endif()
CMAKE
  echo "$PWD/$file"
}

# llama's model sources are compiled in unity batches whose generated files include every source
# by its absolute path, so a compiler cache could never reuse them in another worktree and every
# candidate would recompile them all. After each configure, include them by a relative path.
relative_unity_includes() {
  local file rel
  while IFS= read -r -d '' file; do
    grep -q "^#include \"$PWD/" "$file" || continue
    rel=$(realpath --relative-to="$(dirname "$file")" "$PWD")
    sed -i "s|^#include \"$PWD/|#include \"$rel/|" "$file"
  done < <(find "$BUILD_DIR" -path '*/Unity/unity_*' -type f -print0)
}

build() {
  local launcher="${AUTORESEARCH_CCACHE:-$(command -v ccache || true)}" target
  local args=(
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
    # CPU only: every GPU and accelerator backend off, so the CPU backend is what runs.
    -DGGML_CUDA=OFF -DGGML_HIP=OFF -DGGML_MUSA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF
    -DGGML_SYCL=OFF -DGGML_OPENCL=OFF -DGGML_WEBGPU=OFF -DGGML_CANN=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF --no-warn-unused-cli
    "-DCMAKE_PROJECT_INCLUDE=$(opbench_cmake)"
  )
  if [ -n "$launcher" ]; then
    args+=("-DCMAKE_C_COMPILER_LAUNCHER=$launcher" "-DCMAKE_CXX_COMPILER_LAUNCHER=$launcher")
  fi
  target=$(cross_target)
  if [ -n "${CMAKE_TOOLCHAIN_FILE:-}" ]; then
    # a platform's own toolchain file (the aarch64-qemu preset ships one); -march=native would
    # describe this machine, not the target
    args+=("-DCMAKE_TOOLCHAIN_FILE=$CMAKE_TOOLCHAIN_FILE" -DGGML_NATIVE=OFF)
  elif [ -n "$target" ]; then
    args+=("-DCMAKE_TOOLCHAIN_FILE=$PWD/$(toolchain_file "$target")" -DGGML_NATIVE=OFF)
  else
    args+=(-DGGML_NATIVE=ON)
    # llama.cpp's AMX kernels (Sapphire Rapids and later) crash on machines that have AMX: the tile
    # configuration is optimized away and worker threads never ask Linux for the tile state (llama.cpp
    # issues 20824, PR 26954; every Q4_0 prompt crashed in ldtilecfg here). Unless LLAMA_AMX=1, a native
    # build whose compiler would use AMX leaves it out: Q4_0 then runs the repacked AVX-512 kernels.
    if [ "${LLAMA_AMX:-0}" != 1 ] && [[ "$("${CC:-cc}" -march=native -dM -E - < /dev/null 2>/dev/null)" == *__AMX_INT8__* ]]; then
      local no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
      args+=("-DCMAKE_C_FLAGS=${CFLAGS:-} $no_amx" "-DCMAKE_CXX_FLAGS=${CXXFLAGS:-} $no_amx")
      echo "autoresearch.sh: building without AMX ($no_amx); LLAMA_AMX=1 keeps it" >&2
    fi
  fi
  # shellcheck disable=SC2206
  args+=(${LLAMA_CMAKE_ARGS:-})
  local targets=(llama-bench llama-perplexity)
  if [ "${LLAMA_CHECK_BACKEND_OPS:-0}" = 1 ]; then
    args+=(-DLLAMA_BUILD_TESTS=ON)
    targets+=(test-backend-ops)
  fi
  rm -f "$BUILD_DIR/autoresearch-opbench.target"
  cmake -S . -B "$BUILD_DIR" "${args[@]}" >/dev/null
  relative_unity_includes
  cmake --build "$BUILD_DIR" --config Release -j "$(nproc)" --target "${targets[@]}"
  # The op benchmark apart: a tree whose ggml it cannot build still builds and measures end to end
  # (only a focus then fails, saying why), and no binary of an earlier build is left to time.
  rm -f "$BUILD_DIR/bin/autoresearch-opbench"
  if [ -f "$BUILD_DIR/autoresearch-opbench.target" ] &&
     ! cmake --build "$BUILD_DIR" --config Release -j "$(nproc)" --target autoresearch-opbench; then
    echo "autoresearch.sh: the op benchmark did not build against this tree's ggml (above); experiments with a focus will fail" >&2
  fi
}

model() {
  local m="${AUTORESEARCH_MODEL:-}"
  if [ -z "$m" ]; then
    echo "autoresearch.sh: AUTORESEARCH_MODEL is not set: set \"model\" (a GGUF path) or \"model_url\" in .autoresearch/config.json" >&2
    exit 1
  fi
  if [ ! -f "$m" ]; then
    echo "autoresearch.sh: model file not found: $m" >&2
    exit 1
  fi
  echo "$m"
}

bench() {
  local m threads="${AUTORESEARCH_THREADS:-$(nproc)}"
  m=$(model)
  # The op benchmark first: a focus it cannot time fails the run before llama-bench spends its time.
  if [ -n "${AUTORESEARCH_FOCUS:-}" ]; then
    if [ ! -x "$BUILD_DIR/bin/autoresearch-opbench" ]; then
      echo "autoresearch.sh: AUTORESEARCH_FOCUS=$AUTORESEARCH_FOCUS, but the op benchmark was not built (see the build's output)" >&2
      exit 1
    fi
    # Several processes, each metric their median: the op's time moves more from one process to the next
    # (layout, page placement) than within one, so more processes steady it where more evaluations cannot.
    local k="${LLAMA_OPBENCH_PROCESSES:-1}" i ops=""
    for ((i = 0; i < k; i++)); do
      ops+=$("${EMULATOR[@]}" "$BUILD_DIR/bin/autoresearch-opbench" --model "$m" --focus "$AUTORESEARCH_FOCUS" \
             --threads "$threads" --tokens "${LLAMA_BENCH_PROMPT:-128}")$'\n'
    done
    python3 - "$ops" <<'PY'
import re, statistics, sys
runs = {}
for name, value in re.findall(r"^METRIC (\S+)=(\S+)$", sys.argv[1], re.M):
    runs.setdefault(name, []).append(float(value))
for name, values in runs.items():
    print(f"METRIC {name}={statistics.median(values):.4f}")
PY
  fi
  local run=("${EMULATOR[@]}" "$BUILD_DIR/bin/llama-bench" -m "$m" -ngl 0 -t "$threads" -fa "${LLAMA_BENCH_FA:-1}"
             -o json)
  # No warm-up run where llama-bench can skip it: its CPU time would count work the tokens do not (a recent
  # llama-bench warms up with the whole prompt). The prompt test runs twice instead, so the model's load is
  # about a tenth of its process's CPU time (the generation test's load: about 3%).
  local usage
  usage=$("${run[@]:0:${#EMULATOR[@]}+1}" --help 2>&1 || true)
  [[ "$usage" == *--no-warmup* ]] && run+=(--no-warmup)
  llama_bench_test pp_tps "${run[@]}" -r 2 -p "${LLAMA_BENCH_PROMPT:-128}" -n 0
  llama_bench_test tg_tps "${run[@]}" -r 1 -p 0 -n "${LLAMA_BENCH_GEN:-128}"
}

# One llama-bench test (its name, tg_tps or pp_tps, then its argv) in its own process: prints METRIC
# <name>=<llama-bench's avg_ts> and METRIC <name>.cpu=<its tokens over the process's CPU time, all threads,
# the model's load included>. Why the CPU time: the harness can run a pair's two sides in turns (each gets
# the CPU for a short slice while the other is stopped), so a neighbour's burst falls on both sides; a
# stopped process's wall clock runs on, its CPU time does not, so in turns the judged rates are the .cpu ones.
llama_bench_test() {
  python3 - "$@" <<'PY'
import json, os, subprocess, sys
name, argv = sys.argv[1], sys.argv[2:]
tokens, other = {"tg_tps": ("n_gen", "n_prompt"), "pp_tps": ("n_prompt", "n_gen")}[name]
proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
out = proc.stdout.read()
proc.stdout.close()
# wait4, not Popen.wait: the rusage of this child alone, all its threads
_, status, usage = os.wait4(proc.pid, 0)
proc.returncode = os.waitstatus_to_exitcode(status)
if proc.returncode != 0:
    sys.exit(f"autoresearch.sh: llama-bench's {name} test failed (exit status {proc.returncode}): {' '.join(argv)}")
try:
    records = json.loads(out)
except ValueError:
    records = None
if not isinstance(records, list):
    sys.exit(f"autoresearch.sh: llama-bench's {name} test did not print JSON records: {out[:300]!r}")
# Each test is one JSON record; pick it by its fields, never by position or by a default:
# reading the wrong record once reported 14 t/s of text generation as 52 t/s.
found = [r for r in records if isinstance(r, dict) and r.get(tokens, 0) > 0 and r.get(other, 0) == 0]
if len(found) != 1 or not isinstance(found[0].get("avg_ts"), (int, float)):
    sys.exit(f"autoresearch.sh: expected one llama-bench record with avg_ts for {name}, found {len(found)}")
cpu_s = usage.ru_utime + usage.ru_stime
if not cpu_s > 0:
    sys.exit(f"autoresearch.sh: llama-bench's {name} test used no measurable CPU time ({cpu_s} s)")
print(f"METRIC {name}={found[0]['avg_ts']}")
reps = int(argv[argv.index("-r") + 1]) if "-r" in argv else 1  # every repetition's tokens are in its CPU time
print(f"METRIC {name}.cpu={found[0][tokens] * reps / cpu_s:.4f}")
PY
}

case "${1:-}" in
  build) build ;;
  bench) bench ;;
  *) echo "usage: $0 build|bench" >&2; exit 2 ;;
esac
