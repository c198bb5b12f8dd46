#!/usr/bin/env bash
# Checks the Docker deployment without a Docker engine (none runs on our machines):
#
#  1. docker-compose.yml is valid (`docker-compose config -q`, Debian's docker-compose;
#     skipped with a note when it is not installed) and the host paths it mounts exist;
#  2. every outboxd command in it is real: each `outboxd <subcommand>`,
#     `outboxd-example-confirm`, `outboxd-example-billing` invocation, each `--flag`
#     and each OUTBOXD_* variable of a service is accepted by that binary's `--help`,
#     and every REQUIRED option is given as a flag or a variable;
#  3. the Dockerfile's runtime stage installs every shared library the binaries load:
#     each library `ldd` resolves comes from a Debian package named on the final
#     stage's `apt-get install` line or, for indirect ones, from a package those
#     depend on (dpkg -S + dpkg's Depends); libc6/libstdc++6/libgcc-s1 are in every
#     Debian image. The build stage only installs packages listed in scripts/deps.
#  4. deploy/prometheus/outboxd-alerts.yml is a valid rules file (`promtool check
#     rules`) whose alerts fire as its unit tests expect (`promtool test rules
#     outboxd-alerts.test.yml`); without promtool (Debian's prometheus package, in
#     scripts/deps), a structural check: every rule has an alert name and an expr.
#  5. what the demo exposes (tests/deploy/compose_exposure.py): every published port on
#     127.0.0.1, no secret in a service's environment (secret files under /run/secrets
#     instead, each listed by its service and present), the header saying DEMO ONLY;
#     broken copies of the file must fail.
#  6. the NATS profile: deploy/nats/nats-server.conf is a configuration nats-server
#     accepts (`nats-server -t`, skipped without nats-server), with JetStream on, and
#     the relay's URL secret (deploy/compose-secrets/nats_url) logs in as the user it
#     defines; a service of the profile runs `outboxd run` with OUTBOXD_SINK nats.
#
#   tests/deploy/check_compose.sh [SOURCE_DIR [BIN_DIR]]   # defaults: repo, build/bin
set -euo pipefail

src=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=${2:-$src/build/bin}
compose=$src/docker-compose.yml
dockerfile=$src/Dockerfile
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
note() { echo "check_compose: $*"; }

[[ -f $compose ]] || { echo "FAIL: no $compose" >&2; exit 1; }
[[ -f $dockerfile ]] || { echo "FAIL: no $dockerfile" >&2; exit 1; }
binaries=(outboxd outboxd-example-confirm outboxd-example-billing)
for b in "${binaries[@]}"; do
  [[ -x $bin/$b ]] || { echo "FAIL: $bin/$b not built" >&2; exit 1; }
done

# ---- 1. the compose file is valid -------------------------------------------------
if command -v docker-compose >/dev/null 2>&1; then
  if out=$(cd "$src" && docker-compose -f "$compose" config -q 2>&1); then
    note "docker-compose config -q: ok"
  else
    fail "docker-compose config -q rejects docker-compose.yml:"$'\n'"$out"
  fi
else
  note "docker-compose not installed (scripts/deps installs it): skipping 'config -q'"
fi
# Bind-mounted host paths (`- ./path:/container/path`) must exist.
while read -r path; do
  [[ -e $src/$path ]] || fail "docker-compose.yml mounts ./$path, which does not exist"
done < <(sed -nE 's/^[[:space:]]*-[[:space:]]*"?\.\/([^:]+):.*/\1/p' "$compose")

# ---- 2. every outboxd command, flag and variable is accepted ----------------------
# One record per service using the outboxd image (image outboxd:* or build:), fields
# separated by \037: service, entrypoint, command, space-separated OUTBOXD_* variables.
# Commands must fit on one line (a string or a [flow, list]).
records=$(awk '
  function flush() {
    if (svc != "" && ours) printf "%s\037%s\037%s\037%s\n", svc, ep, cmd, vars
    svc = ""; ours = 0; ep = ""; cmd = ""; vars = ""
  }
  /^services:/ { in_services = 1; next }
  /^[^ #]/ { flush(); in_services = 0; next }
  in_services && /^  [A-Za-z0-9_.-]+:[ \t]*$/ {
    flush(); svc = $1; sub(/:$/, "", svc); next
  }
  svc != "" && /^    image:[ \t]*outboxd(:|[ \t]*$)/ { ours = 1 }
  svc != "" && /^    build:/ { ours = 1 }
  svc != "" && /^    entrypoint:/ {
    line = $0; sub(/^    entrypoint:[ \t]*/, "", line)
    if (line == "") { print "MULTILINE\037" svc "\037entrypoint"; next }
    ep = line
  }
  svc != "" && /^    command:/ {
    line = $0; sub(/^    command:[ \t]*/, "", line)
    if (line == "") { print "MULTILINE\037" svc "\037command"; next }
    cmd = line
  }
  svc != "" && /^      OUTBOXD_[A-Z0-9_]+[ \t]*[:=]/ {
    v = $1; sub(/[:=].*/, "", v); vars = vars " " v
  }
  svc != "" && /^      -[ \t]*"?OUTBOXD_[A-Z0-9_]+=/ {
    v = $0; sub(/^      -[ \t]*"?/, "", v); sub(/=.*/, "", v); vars = vars " " v
  }
  END { flush() }
' "$compose")

declare -A help_cache=()
help_of() {  # binary [subcommand]: prints its --help (cached); fails if rejected
  local key="$*"
  if [[ -z ${help_cache[$key]+x} ]]; then
    help_cache[$key]=$("$bin/$1" ${2:+"$2"} --help 2>&1) || return 1
  fi
  printf '%s\n' "${help_cache[$key]}"
}
outboxd_subcommands=$(help_of outboxd | awk '/^Subcommands:/ { s = 1; next } s && NF { print $1 }')

seen=" "
while IFS=$'\037' read -r service ep cmd vars; do
  if [[ $service == MULTILINE ]]; then
    fail "service $ep: write its $cmd on one line (a string or a [flow, list]) so it can be checked"
    continue
  fi
  # Tokens of entrypoint + command, YAML list punctuation and quotes removed; an
  # image-default entrypoint is `outboxd`. `$$` is compose's escape for `$`.
  strip() { sed -E 's/^[[:space:]]*\[//; s/\][[:space:]]*$//; s/"[[:space:]]*,[[:space:]]*"/ /g; s/"//g; s/\$\$/$/g' <<<"$1"; }
  line="$(strip "${ep:-outboxd}") $(strip "$cmd")"
  read -r -a tokens <<<"$line"
  # Shell separators end an invocation.
  invocations=()   # "binary|subcommand|flag flag ..."
  current=""
  for t in "${tokens[@]}"; do
    base=${t##*/}
    case $base in
      outboxd | outboxd-example-confirm | outboxd-example-billing)
        [[ -n $current ]] && invocations+=("$current")
        current="$base||"; continue ;;
    esac
    [[ -z $current ]] && continue
    if [[ $current == outboxd\|\|* && $t != -* ]]; then   # the subcommand
      current="outboxd|$t|"; continue
    fi
    [[ $t =~ ^--[A-Za-z0-9][A-Za-z0-9-]* ]] && current+="${BASH_REMATCH[0]} "
    if [[ $t == *";"* || $t == "||" || $t == "&&" || $t == "|" ]]; then
      invocations+=("$current"); current=""
    fi
  done
  [[ -n $current ]] && invocations+=("$current")
  [[ ${#invocations[@]} -gt 0 ]] || { fail "service $service runs no outboxd binary: $line"; continue; }

  for inv in "${invocations[@]}"; do
    IFS='|' read -r binary sub flags <<<"$inv"
    what="$binary${sub:+ $sub}"
    if [[ $binary == outboxd ]]; then
      if [[ -z $sub ]] || ! grep -qx -- "$sub" <<<"$outboxd_subcommands"; then
        fail "service $service: 'outboxd ${sub:-<none>}' is not an outboxd subcommand (have: $(paste -sd" " - <<<"$outboxd_subcommands"))"
        continue
      fi
    fi
    if ! help=$(help_of "$binary" "$sub"); then
      fail "service $service: '$what --help' fails"; continue
    fi
    seen+="$what|"
    for f in $flags; do
      grep -qE -- "(^|[[:space:],])$f([[:space:]=]|$)" <<<"$help" ||
        fail "service $service: '$what' has no flag $f"
    done
    for v in $vars; do
      grep -qF -- "(Env:$v)" <<<"$help" ||
        fail "service $service: '$what' reads no variable $v"
    done
    # Every REQUIRED option given, as a flag or its variable.
    while read -r opt env; do
      [[ " $flags " == *" $opt "* ]] && continue
      [[ -n $env && " $vars " == *" $env "* ]] && continue
      fail "service $service: '$what' needs $opt${env:+ or $env}, the service sets neither"
    done < <(awk '/REQUIRED/ && match($0, /--[A-Za-z0-9-]+/) {
                    opt = substr($0, RSTART, RLENGTH); env = ""
                    if (match($0, /\(Env:[A-Z0-9_]+\)/)) env = substr($0, RSTART + 5, RLENGTH - 6)
                    print opt, env }' <<<"$help")
  done
done <<<"$records"
for expected in "outboxd setup" "outboxd run" "outboxd-example-confirm" "outboxd-example-billing"; do
  [[ $seen == *"|$expected|"* || $seen == *" $expected|"* ]] ||
    fail "docker-compose.yml runs no '$expected' service (or this check no longer finds it)"
done
note "compose commands checked: $(tr '|' '\n' <<<"$seen" | sed '/^ *$/d' | sort -u | paste -sd, -)"

# ---- 3. the Dockerfile's runtime packages provide every shared library ------------
# Packages of an `apt-get install` in a stage (0 = first, last = final): the words after
# `install` up to `&&`, options dropped; continuation lines joined.
stage_packages() {  # first|last
  awk -v which="$1" '
    /^FROM[ \t]/ { n++ }
    { lines[NR] = $0; stage[NR] = n }
    END {
      want = (which == "first") ? 1 : n
      text = ""
      for (i = 1; i <= NR; i++) if (stage[i] == want) {
        l = lines[i]; if (l ~ /^[ \t]*#/) continue
        sub(/\\[ \t]*$/, " ", l); text = text " " l
      }
      while (match(text, /apt-get install[^&]*/)) {
        cmd = substr(text, RSTART + 15, RLENGTH - 15); text = substr(text, RSTART + RLENGTH)
        m = split(cmd, w, /[ \t]+/)
        for (j = 1; j <= m; j++) if (w[j] != "" && w[j] !~ /^-/) print w[j]
      }
    }' "$dockerfile"
}
runtime=$(stage_packages last)
build_pkgs=$(stage_packages first)
[[ -n $runtime ]] || fail "Dockerfile: no 'apt-get install' in the final stage"
[[ $(grep -c '^FROM' "$dockerfile") -ge 2 ]] || fail "Dockerfile: not multi-stage"
grep -qE '^USER[[:space:]]+[^r0]' "$dockerfile" || fail "Dockerfile: no non-root USER"
grep -qE '^HEALTHCHECK[[:space:]].*' "$dockerfile" || fail "Dockerfile: no HEALTHCHECK"
for b in "${binaries[@]}"; do
  grep -qE "/bin/$b([[:space:]]|$)" "$dockerfile" || fail "Dockerfile: the image does not copy $b"
done
deps_pkgs=$(sed -n '/^packages=(/,/^)/p' "$src/scripts/deps" | sed 's/#.*//' | tr -s ' ()' '\n' | sed '/^$/d;/=/d')
for p in $build_pkgs; do
  grep -qx -- "$p" <<<"$deps_pkgs" || fail "Dockerfile build stage installs $p, which scripts/deps does not list"
done

if ! command -v dpkg >/dev/null 2>&1; then
  note "no dpkg (not Debian): skipping the runtime library check"
else
  for p in $runtime; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      apt-cache show "$p" >/dev/null 2>&1 ||
        fail "Dockerfile runtime stage installs $p, which is no Debian package here"
    fi
  done
  # Everything the named packages pull in (installed Depends/Pre-Depends, recursively).
  declare -A depends_of=() closure=()
  while IFS=$'\t' read -r p deps; do
    depends_of[$p]+=" $deps"
  done < <(dpkg-query -W -f='${Package}\t${Depends}, ${Pre-Depends}\n' | awk -F'\t' '{
             n = split($2, alt, /[,|]/); out = ""
             for (i = 1; i <= n; i++) {
               d = alt[i]; sub(/\(.*\)/, "", d); sub(/:[a-z0-9]+/, "", d); gsub(/[ \t]/, "", d)
               if (d != "") out = out " " d
             }
             print $1 "\t" out }')
  mapfile -t queue < <(printf '%s\n' "$runtime" libc6 libstdc++6 libgcc-s1)
  while [[ ${#queue[@]} -gt 0 ]]; do
    p=${queue[0]}; queue=("${queue[@]:1}")
    [[ -n ${closure[$p]+x} ]] && continue
    closure[$p]=1
    for d in ${depends_of[$p]:-}; do [[ -z ${closure[$d]+x} ]] && queue+=("$d"); done
  done
  # Which package owns each library ldd resolves: one pass over dpkg's file lists,
  # paths compared without /usr (usr-merge) and through symlinks.
  declare -A lib_path=()
  for b in "${binaries[@]}"; do
    while read -r name path; do lib_path[$path]=1; done \
      < <(ldd "$bin/$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 } $1 ~ /^\// { print $1, $1 }')
  done
  wanted=$(for p in "${!lib_path[@]}"; do echo "$p"; readlink -f "$p"; done | sed -E 's#^/usr/#/#' | sort -u)
  declare -A owner_of=()
  while IFS=$'\t' read -r path pkg; do owner_of[$path]=$pkg; done < <(
    awk -v wanted="$wanted" '
      BEGIN { n = split(wanted, w, "\n"); for (i = 1; i <= n; i++) want[w[i]] = 1 }
      { p = $0; sub(/^\/usr\//, "/", p)
        if (p in want) { f = FILENAME; sub(/.*\//, "", f); sub(/\.list$/, "", f); sub(/:.*/, "", f)
                         print p "\t" f } }' /var/lib/dpkg/info/*.list)
  owner() {  # path: the Debian package providing it
    local c
    for c in "$1" "$(readlink -f "$1")"; do
      c=${c#/usr}
      [[ -n ${owner_of[$c]+x} ]] && { echo "${owner_of[$c]}"; return 0; }
    done
    return 1
  }
  libs_checked=0
  for b in "${binaries[@]}"; do
    if ldd "$bin/$b" | grep -q 'not found'; then
      fail "$b: ldd finds no $(ldd "$bin/$b" | awk '/not found/ { print $1 }' | paste -sd, -)"
    fi
    needed=" $(objdump -p "$bin/$b" 2>/dev/null | awk '$1 == "NEEDED" { printf "%s ", $2 }')"
    while read -r name path; do
      pkg=$(owner "$path") || { fail "$b: no Debian package owns $path"; continue; }
      libs_checked=$((libs_checked + 1))
      if [[ $needed == *" $name "* ]]; then   # linked directly: named explicitly
        case $pkg in libc6 | libstdc++6 | libgcc-s1) continue ;; esac
        grep -qx -- "$pkg" <<<"$runtime" ||
          fail "$b links $name ($pkg): add $pkg to the Dockerfile's runtime apt-get install"
      else
        [[ -n ${closure[$pkg]+x} ]] ||
          fail "$b loads $name ($pkg), which no runtime package of the Dockerfile depends on"
      fi
    done < <(ldd "$bin/$b" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 } $1 ~ /^\// { print $1, $1 }')
  done
  note "runtime packages ($(paste -sd" " - <<<"$runtime")) cover $libs_checked libraries of ${binaries[*]}"
fi

# ---- 4. the Prometheus alert rules --------------------------------------------------
rules=$src/deploy/prometheus/outboxd-alerts.yml
if [[ ! -f $rules ]]; then
  fail "no $rules"
elif command -v promtool >/dev/null 2>&1; then
  if out=$(promtool check rules "$rules" 2>&1); then
    note "promtool check rules: $(grep -o 'SUCCESS.*' <<<"$out" | head -1)"
  else
    fail "promtool check rules rejects $rules:"$'\n'"$out"
  fi
  if out=$(cd "$(dirname "$rules")" && promtool test rules outboxd-alerts.test.yml 2>&1); then
    note "promtool test rules: ok"
  else
    fail "promtool test rules (deploy/prometheus/outboxd-alerts.test.yml) fails:"$'\n'"$out"
  fi
else
  note "promtool not installed (scripts/deps installs prometheus): structural check only"
  alerts=$(grep -cE '^[[:space:]]*- alert:[[:space:]]*[A-Za-z]' "$rules" || true)
  exprs=$(grep -cE '^[[:space:]]+expr:[[:space:]]*[^[:space:]]' "$rules" || true)
  grep -qE '^groups:' "$rules" || fail "$rules: no top-level groups:"
  [[ $alerts -gt 0 && $alerts -eq $exprs ]] ||
    fail "$rules: $alerts alerts but $exprs exprs (each rule needs both)"
fi
for metric in outboxd_oldest_unacked_age_seconds outboxd_slot_lag_bytes 'up{' \
              outboxd_events_dead_lettered_total; do
  grep -qF -- "$metric" "$rules" || fail "$rules: no alert on $metric"
done

# ---- 5. what the demo exposes -------------------------------------------------------
if ! python3 -c 'import yaml' 2>/dev/null; then
  fail "python3 with PyYAML is needed (Debian's docker-compose, in scripts/deps, brings it)"
elif ! python3 "$src/tests/deploy/compose_exposure.py" "$src"; then
  fail "docker-compose.yml exposes a port or a secret (above)"
fi

# ---- 6. the NATS profile ---------------------------------------------------------
nats_conf=$src/deploy/nats/nats-server.conf
if [[ ! -f $nats_conf ]]; then
  fail "no $nats_conf"
else
  if command -v nats-server >/dev/null 2>&1; then
    out=$(nats-server -t -c "$nats_conf" 2>&1) || fail "nats-server -t rejects $nats_conf: $out"
  else
    note "nats-server not installed (scripts/deps installs it): skipping 'nats-server -t'"
  fi
  grep -qE '^jetstream[[:space:]]*\{' "$nats_conf" || fail "$nats_conf: JetStream is not on"
  conf_user=$(sed -nE 's/^[[:space:]]*user:[[:space:]]*([^[:space:]]+).*/\1/p' "$nats_conf")
  conf_password=$(sed -nE 's/^[[:space:]]*password:[[:space:]]*([^[:space:]]+).*/\1/p' "$nats_conf")
  url=$(cat "$src/deploy/compose-secrets/nats_url" 2>/dev/null || true)
  [[ $url == "nats://$conf_user:$conf_password@nats:"* ]] ||
    fail "deploy/compose-secrets/nats_url does not log in as $nats_conf's user $conf_user"
fi
awk '/^  outboxd-nats:/ { s = 1; next } /^  [^ ]/ { s = 0 } s' "$compose" |
  grep -qE 'OUTBOXD_SINK:[[:space:]]*nats' ||
  fail "docker-compose.yml: no service outboxd-nats with OUTBOXD_SINK: nats"

if [[ $failures -gt 0 ]]; then
  echo "check_compose: $failures problem(s)" >&2
  exit 1
fi
note "ok"
