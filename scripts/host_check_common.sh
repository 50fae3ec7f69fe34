# Sourced by scripts/amx_host_check.sh, manycore_host_check.sh and gpu_host_check.sh: the
# dependency pack for a host without network or apt, the JSON-line writer, and the CMake
# arguments for the pack.

# pack_deps DIR: on a Debian host with the -dev packages, copy the CLI11, nlohmann-json and
# GoogleTest headers, CMake files and static libraries to DIR (the config files locate their
# targets relative to themselves, so the layout is kept as is), the cuDNN frontend headers
# (scripts/fetch_cudnn_frontend.sh; DIR/cudnn_frontend, where CMake looks in a carried
# third_party_carry/) for the CUDA step kernels' cuDNN backend on a GPU host without network,
# and the C headers of a Python 3.12 (BURST_PACK_PYTHON, default python3.12: the GPU host's
# version; DIR/python/include/python3.12), which a GPU host whose Python has none builds the
# Python module against (python_headers below).
pack_deps() {
  local dest=$1 arch=lib/x86_64-linux-gnu
  mkdir -p "$dest"/include "$dest"/$arch/cmake "$dest"/share/cmake
  cp -r /usr/include/gtest /usr/include/gmock /usr/include/CLI /usr/include/nlohmann "$dest"/include/
  cp /usr/$arch/libgtest.a /usr/$arch/libgtest_main.a /usr/$arch/libgmock.a /usr/$arch/libgmock_main.a "$dest"/$arch/
  cp -r /usr/$arch/cmake/GTest "$dest"/$arch/cmake/
  cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$dest"/share/cmake/
  scripts/fetch_cudnn_frontend.sh
  if [[ -f third_party/cudnn_frontend/include/cudnn_frontend.h ]]; then
    rm -rf "$dest"/cudnn_frontend
    cp -r third_party/cudnn_frontend "$dest"/cudnn_frontend
  else
    echo "pack_deps: no cuDNN frontend headers to pack (offline?): the GPU host builds without the cuDNN backend" >&2
  fi
  local pyinc
  pyinc=$("${BURST_PACK_PYTHON:-python3.12}" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
  if [[ -f $pyinc/Python.h ]]; then
    rm -rf "$dest"/python
    mkdir -p "$dest"/python/include
    cp -r "$pyinc" "$dest"/python/include/
  else
    echo "pack_deps: no Python 3.12 headers to pack (BURST_PACK_PYTHON): a GPU host without them builds no Python module" >&2
  fi
  echo "packed into $dest ($(du -sh "$dest" | cut -f1)); copy it to the host as third_party_carry/"
}

# python_headers PY PREFIX: the folder holding Python.h for PY's version: PY's own, else the
# pack's (PREFIX/python/include/pythonX.Y), else nothing.
python_headers() {
  local own ver
  own=$("$1" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
  ver=$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
  if [[ -n $own && -f $own/Python.h ]]; then
    echo "$own"
  elif [[ -n $2 && -n $ver && -f $2/python/include/python$ver/Python.h ]]; then
    echo "$2/python/include/python$ver"
  fi
  return 0
}

# emit NAME KEY=VALUE...: appends {"check": NAME, KEY: VALUE...} to $out with the Python in $py;
# values that parse as JSON are kept as JSON, and "@FILE" is that file's JSON (for values too
# long for an argument).
emit() {
  "$py" - "$@" >>"$out" <<'PYEOF'
import json, sys
rec = {"check": sys.argv[1]}
for kv in sys.argv[2:]:
    k, v = kv.split("=", 1)
    try:
        rec[k] = json.load(open(v[1:])) if v.startswith("@") else json.loads(v)
    except ValueError:
        rec[k] = v
print(json.dumps(rec))
PYEOF
}

# The pack to build against: BURST_DEPS_PREFIX, else ./third_party_carry if present, else none
# (the system's own packages).
deps_prefix() {
  local deps=${BURST_DEPS_PREFIX:-}
  [[ -z $deps && -d third_party_carry ]] && deps=$PWD/third_party_carry
  echo "$deps"
}

# deps_cmake_args PREFIX: the -D arguments that make CMake find the pack at PREFIX (none if empty).
deps_cmake_args() {
  [[ -n $1 ]] && printf '%s\n' "-DCMAKE_PREFIX_PATH=$1" "-DGTest_DIR=$1/lib/x86_64-linux-gnu/cmake/GTest" \
    "-DCLI11_DIR=$1/share/cmake/CLI11" "-Dnlohmann_json_DIR=$1/share/cmake/nlohmann_json"
  [[ -n $1 && -f $1/cudnn_frontend/include/cudnn_frontend.h ]] && printf '%s\n' "-DBURST_CUDNN_FRONTEND_DIR=$1/cudnn_frontend"
  return 0
}

# gpu_dist_cases S: the `burst bench dist` cases of the GPU host check, one a line: "P STRATEGY
# ARGS..." (every strategy at P = 4, burst at P = 1, 2 and 3; causal, H 8, D 64, bf16, both
# passes). S must be a multiple of 24 (zigzag's 2·P chunks at every P); distflash runs on the
# contiguous layout its schedule is defined on, the others on zigzag. tests/host_check_cases.sh
# runs the same lines on CPU ranks, so a case the CLI refuses fails there, not on the GPU host.
gpu_dist_cases() {
  local seq=$1 run P strategies strategy layout
  if ((seq % 24 != 0)); then
    echo "gpu_dist_cases: S $seq is not a multiple of 24" >&2
    return 2
  fi
  for run in "4 burst ring allgather ulysses usp distflash headpar" "1 burst" "2 burst" "3 burst"; do
    read -r P strategies <<<"$run"
    for strategy in $strategies; do
      layout=zigzag
      [[ $strategy == distflash ]] && layout=contiguous
      echo "$P $strategy --strategy $strategy --layout $layout --seq $seq --heads 8 --dim 64 --dtype bf16" \
        "--mask causal --pass both"
    done
  done
}

# check_args SCRIPT ARG...: --help prints SCRIPT's header comment and exits; an unknown option
# (anything else starting with "-" that the script does not take: --pack, --quick) is an error.
check_args() {
  local script=$1
  shift
  case ${1:-} in
    -h | --help)
      sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$script"
      exit 0
      ;;
    --pack | --quick | "") ;;
    -*)
      echo "$(basename "$script"): unknown option '$1' (see --help)" >&2
      exit 2
      ;;
  esac
}
