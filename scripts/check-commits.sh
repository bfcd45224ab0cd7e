#!/usr/bin/env bash
# Checks the commit rule of README.md's Contributing section on the commits
# since BASE: every subject at most 72 characters. Run by task check.
#
# Usage: scripts/check-commits.sh [BASE]
# BASE defaults to KAT_COMMIT_BASE, else the first commit of the rule
# ("apiclient: the HTTP client leaves api for a folder of its own"). A clone
# that does not hold BASE (a shallow clone, as CI systems make) or whose HEAD
# does not descend from it is not checked: the script says so and succeeds.
# Subjects are counted in characters, not bytes.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C.UTF-8

base=${1:-${KAT_COMMIT_BASE:-126e9f9105778a3c7b087a76bae6100296650e1f}}
max=72
# Commits made before the rule was checked, whose subjects history keeps.
grandfathered=(
  6ab7dc61799ea4cec73e6031a276fc2ea960bdda
)

if ! git rev-parse --git-dir >/dev/null 2>&1; then
  echo "check-commits: not a Git checkout, nothing to check"
  exit 0
fi
if ! git cat-file -e "$base^{commit}" 2>/dev/null; then
  shallow=$(git rev-parse --is-shallow-repository 2>/dev/null || echo false)
  if [ "$shallow" = true ]; then
    echo "check-commits: $base is not in this shallow clone: commit subjects not checked (git fetch --unshallow to check them)"
  else
    echo "check-commits: $base is not in this clone: commit subjects not checked"
  fi
  exit 0
fi
if ! git merge-base --is-ancestor "$base" HEAD; then
  echo "check-commits: HEAD does not descend from $base: commit subjects not checked"
  exit 0
fi

bad=0
checked=0
while IFS= read -r -d '' entry; do
  hash=${entry%% *}
  subject=${entry#* }
  checked=$((checked + 1))
  for g in "${grandfathered[@]}"; do
    [ "$hash" = "$g" ] && continue 2
  done
  if [ "${#subject}" -gt "$max" ]; then
    echo "commit ${hash:0:12}: subject of ${#subject} characters, at most $max: $subject" >&2
    bad=$((bad + 1))
  fi
done < <(git log -z --format='%H %s' "$base..HEAD")

if [ "$bad" -gt 0 ]; then
  echo "check-commits: $bad of $checked commit subjects since ${base:0:12} are longer than $max characters;" >&2
  echo "  reword them before they reach main (git rebase -i, then reword): a short subject, the why in the body" >&2
  exit 1
fi
echo "check-commits: $checked commit subjects since ${base:0:12}, all at most $max characters"
