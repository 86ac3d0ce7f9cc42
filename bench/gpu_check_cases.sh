# SPDX-License-Identifier: Apache-2.0
# The compute-sanitizer stage of bench/gpu_check.sh: which test cases of a
# [cuda] test program run under a tool, and the check that they all ran.
# Sourced by gpu_check.sh and by tests/bench/test_gpu_check_cases.sh (which
# runs it on a host test program with a stand-in for compute-sanitizer).
# Needs: $log_dir (the folder for logs; $out when unset) and a
# compute-sanitizer on PATH.

# Writes to `file` every `step`-th test case name of `prog`, at most `most`
# of them, and every name that starts with one of the `also` prefixes
# (optional; comma-separated; a name's spaces read as "_" when it is
# compared with a prefix). Each name is written
# as a Catch input-file (-f) entry: the characters Catch's filter syntax
# reads (, [ ] * ~ " \) are escaped. A bare comma would split a name into
# two filters that match nothing, and Catch reports "Invalid Filter" and
# still exits 0. Fails when nothing was picked.
pick_cases() {
  local prog="$1" step="$2" most="$3" file="$4" also="${5:-}"
  local names prefix
  local -a prefixes=()
  names="$("$prog" --list-test-names-only 2>/dev/null | sed '/^$/d')"
  # No names: an empty file would make Catch run every test case.
  [[ -n "$names" ]] || return 1
  {
    awk -v s="$step" -v m="$most" '(NR - 1) % s == 0 && n < m { print; n++ }' <<<"$names"
    if [[ -n "$also" ]]; then
      IFS=',' read -r -a prefixes <<<"$also"
      for prefix in "${prefixes[@]}"; do
        awk -v p="$prefix" '{ n = $0; gsub(/ /, "_", n); if (index(n, p) == 1) print }' <<<"$names"
      done
    fi
  } | awk '!seen[$0]++' | sed 's/[][\\,*~"]/\\&/g' >"$file"
  [[ -s "$file" ]]
}

# Runs `tool` over the picked cases of `prog` (see pick_cases); the log is
# $log_dir/sanitizer-TOOL-PROG.log. Fails when the tool or a test fails, when
# Catch rejected a name, or when fewer cases ran than were picked.
sanitize() {
  local tool="$1" prog="$2" step="$3" most="$4" also="${5:-}"
  local name log cases
  name="$tool-$(basename "$prog")"
  log="${log_dir:-$out}/sanitizer-$name.log"
  cases="${log_dir:-$out}/sanitizer-$name.cases"
  if [[ ! -x "$prog" ]]; then
    echo "$name: $prog was not built" >"$log"
    return 1
  fi
  pick_cases "$prog" "$step" "$most" "$cases" "$also" || {
    echo "$name: no test cases listed" >"$log"
    return 1
  }
  local rc=0
  timeout --kill-after=10 "${LOOM_GPU_CHECK_SANITIZER_TIMEOUT:-120}" compute-sanitizer --tool "$tool" \
    --error-exitcode 86 "$prog" -f "$cases" >"$log" 2>&1 || rc=$?
  if ((rc == 124 || rc == 137)); then
    echo "$name: timed out after ${LOOM_GPU_CHECK_SANITIZER_TIMEOUT:-120} s" >>"$log"
  fi
  ((rc == 0)) || return "$rc"
  if grep -qE 'Invalid Filter|No tests ran|No test cases matched' "$log"; then
    echo "$name: Catch did not match every listed test case (see above)" >>"$log"
    return 1
  fi
  local ran want
  ran="$(grep -oE '^All tests passed \(.* in [0-9]+ test cases?\)' "$log" | tail -n 1 | grep -oE '[0-9]+ test case' |
    grep -oE '[0-9]+')"
  want="$(wc -l <"$cases")"
  if [[ "$ran" != "$want" ]]; then
    echo "$name: ${ran:-no} test cases ran of the $want listed" >>"$log"
    return 1
  fi
}
