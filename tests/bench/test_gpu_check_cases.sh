#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu_check_cases.sh picks the test cases that compute-sanitizer runs
# on a GPU machine. Checked here on a host test program, with a stand-in for
# compute-sanitizer that runs the program directly: names with commas and
# other filter characters must run (unescaped, Catch drops them as "Invalid
# Filter" and still exits 0), and a run that skips listed cases must fail.
# Usage: test_gpu_check_cases.sh PATH/TO/gpu_check_cases.sh PATH/TO/test_program
set -uo pipefail
lib="$1" prog="$2"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# shellcheck source=bench/gpu_check_cases.sh
source "$lib"
stub="$out/bin"
mkdir -p "$stub"
# compute-sanitizer --tool T --error-exitcode N PROG ARGS...: runs PROG ARGS
# (LOOM_STUB_MANGLE=1 strips the escapes first; =drop keeps one case only).
cat >"$stub/compute-sanitizer" <<'STUB'
#!/usr/bin/env bash
shift 4
prog="$1" file="$3"
case "${LOOM_STUB_MANGLE:-}" in
  1) sed 's/\\//g' "$file" >"$file.run" ;;
  drop) sed '2,$d' "$file" >"$file.run" ;;
  *) cp "$file" "$file.run" ;;
esac
exec "$prog" -f "$file.run"
STUB
chmod +x "$stub/compute-sanitizer"
PATH="$stub:$PATH"

names="$("$prog" --list-test-names-only | sed '/^$/d')"
total="$(wc -l <<<"$names")"
with_comma="$(grep -c ',' <<<"$names")"
((with_comma > 0)) || fail "the program has no test name with a comma: this test would check nothing"

# Every case (step 1): the file lists each name once, commas escaped.
pick_cases "$prog" 1 100000 "$out/all.cases" || fail "pick_cases listed nothing"
[[ "$(wc -l <"$out/all.cases")" == "$total" ]] || fail "pick_cases listed $(wc -l <"$out/all.cases") of $total names"
grep -qE '(^|[^\\]),' "$out/all.cases" && fail "an unescaped comma in the cases file"

# A sample plus two prefixes (one name with commas): all of them run.
first_comma="$(grep -m1 ',' <<<"$names")"
prefix="$(cut -c1-20 <<<"$first_comma")"
if sanitize memcheck "$prog" 7 2 "${prefix// /_},$(head -n1 <<<"$names" | cut -c1-12 | tr ' ' _)"; then
  grep -qF "$(sed 's/[][\\,*~"]/\\&/g' <<<"$first_comma")" "$out/sanitizer-memcheck-$(basename "$prog").cases" ||
    fail "the prefix '$prefix' did not pick '$first_comma'"
else
  fail "sanitize failed on a correct run: $(tail -n 3 "$out/sanitizer-memcheck-$(basename "$prog").log")"
fi

# The same with the escapes stripped (as before 2026-12-02): Catch drops the
# names with commas and exits 0; sanitize must say so.
if LOOM_STUB_MANGLE=1 sanitize memcheck "$prog" 7 2 "${prefix// /_}"; then
  fail "sanitize passed although Catch rejected names"
fi
# Fewer cases ran than were listed.
if LOOM_STUB_MANGLE=drop sanitize memcheck "$prog" 1 3; then
  fail "sanitize passed although 1 of 3 listed cases ran"
fi
# A program that lists no names: nothing is picked (an empty -f file would
# make Catch run every test case under the tool).
printf '#!/bin/sh\nexit 0\n' >"$out/lists_nothing"
chmod +x "$out/lists_nothing"
if pick_cases "$out/lists_nothing" 1 5 "$out/nothing.cases"; then
  fail "pick_cases picked something from a program that lists no test cases"
fi
# With log_dir set (as gpu_check.sh sets it), the log and the cases go there.
log_dir="$out/logs"
mkdir -p "$log_dir"
if sanitize memcheck "$prog" 7 2; then
  [[ -s "$log_dir/sanitizer-memcheck-$(basename "$prog").log" && -s "$log_dir/sanitizer-memcheck-$(basename "$prog").cases" ]] ||
    fail "with log_dir set, the sanitizer log and cases are not in $log_dir"
else
  fail "sanitize failed on a correct run with log_dir set"
fi
unset log_dir
((fails == 0)) && echo "gpu_check_cases: all checks passed ($total names, $with_comma with commas)"
exit $((fails > 0))
