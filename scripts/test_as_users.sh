#!/usr/bin/env bash
# The tests marked `as_user` (confinement, turns, attacks) run again as an ordinary user, as people run Claude Code:
#   delegated  a user with a delegated cgroup v2 subtree (a child of the cgroup2 mount owned by the user, the user's
#              process moved into it by root before the tests: what systemd's user@UID.service gives a laptop's user)
#   plain      a user with nothing delegated (a container's read-only cgroupfs, no systemd)
# Run as root (scripts/test.sh does, after the root tiers); each condition runs the as_user tests as the tiers do (those
# resting on no timing in parallel, then the serial ones one at a time) from a copy of this checkout the users can
# read, in a virtual environment of the system's python3 (the project's own may live where other users cannot read).
# Not root: run `pytest -m as_user -n 0` as yourself instead.
#   bash scripts/test_as_users.sh [delegated|plain ...] [-- pytest arguments]
#   bash scripts/test_as_users.sh --run [delegated|plain ...] -- COMMAND...   (any command instead, run from the copy
#                                          with its venv first on PATH: benchmarks/bench_users.sh uses it)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "test_as_users: not root, so no other user can be made; run 'pytest -m as_user -n 0' as yourself" >&2
  exit 0
fi
mode=pytest
if [ "${1:-}" = --run ]; then mode=run; shift; fi
conditions=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do conditions+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#conditions[@]} -gt 0 ] || conditions=(delegated plain)

place=/var/tmp/autoresearch-as-users
python=$(command -v /usr/bin/python3 || command -v python3)
mkdir -p "$place"
chmod 755 "$place"
echo "test_as_users: a readable copy of the checkout in $place/src, a venv of $python in $place/venv" >&2
rsync -a --delete --exclude .venv --exclude .git --exclude '__pycache__' ./ "$place/src/"
chmod -R a+rX "$place/src"
if [ ! -x "$place/venv/bin/pytest" ]; then
  "$python" -m venv "$place/venv"
  "$place/venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
fi
# the package and what its tests run with (not the linters: they ran as root)
"$place/venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$place/src" pytest pytest-timeout \
  pytest-xdist anyio pyyaml >&2
chmod -R a+rX "$place/venv"

mount=$(awk '$9 == "cgroup2" && $4 == "/" {print $5}' /proc/self/mountinfo | awk '{print length, $0}' | sort -n | head -1 | cut -d' ' -f2-)

run_as() {  # run_as USER [cgroup folder to start in] -- the as_user tests
  local user="$1" group="$2"
  shift 2
  id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
  local home
  home=$(getent passwd "$user" | cut -d: -f6)
  local as=(runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user"
            PATH="$place/venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8)
  if [ $mode = run ]; then
    launch "$group" "${as[@]}" "$@"
    return $?
  fi
  # as the tiers are: the tests that rest on no timing in parallel, then those that do one at a time
  local pytest=("$place/venv/bin/pytest" -q -p no:cacheprovider --rootdir "$place/src" -c "$place/src/pyproject.toml")
  local status
  for part in "as_user and not serial|-n 2 --dist loadgroup" "as_user and serial|-n 0"; do
    read -r -a workers <<< "${part#*|}"
    status=0
    launch "$group" "${as[@]}" "${pytest[@]}" -m "${part%%|*}" "${workers[@]}" "$place/src/tests" "$@" || status=$?
    if [ $status -eq 5 ]; then
      echo "test_as_users: no test of '${part%%|*}' was collected as $user; that is a failure" >&2
      return 1
    fi
    [ $status -eq 0 ] || return $status
  done
}

launch() {  # launch [cgroup folder to start in] COMMAND...: run from the copy, first moved into the group if given
  local group="$1"
  shift
  if [ -n "$group" ]; then
    (cd "$place/src" && sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$group" "$@")
  else
    (cd "$place/src" && "$@")
  fi
}

status=0
for condition in "${conditions[@]}"; do
  case "$condition" in
    delegated)
      user=autoresearch-delegated
      id "$user" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$user"
      if [ -z "$mount" ]; then
        echo "test_as_users: no cgroup2 mount here, so no subtree can be delegated; skipping that condition" >&2
        continue
      fi
      group="$mount/autoresearch-test-$user"
      find "$group" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
      mkdir -p "$group"
      chown "$user" "$group" "$group/cgroup.procs" "$group/cgroup.subtree_control" "$group/cgroup.threads"
      echo "test_as_users: as $user, in the delegated group $group" >&2
      run_as "$user" "$group" "$@" || status=$?
      ;;
    plain)
      echo "test_as_users: as autoresearch-plain, with nothing delegated" >&2
      run_as autoresearch-plain "" "$@" || status=$?
      ;;
    *) echo "test_as_users: unknown condition $condition (delegated or plain)" >&2; exit 2 ;;
  esac
  [ $status -eq 0 ] || exit $status
done
