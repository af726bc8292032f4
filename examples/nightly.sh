#!/usr/bin/env bash
# nightly.sh — one nightly audit. Exit status: 0 no regression (the first night: its run is now
# pinned) / 3 regression / 6 release gate not met / 5 judge failed validation / 4 budget / 2 input
# / 1 partial or failed run, I/O failure / 126, 127 the lmra command could not be run (not
# executable, not found in the venv). The output also goes to logs/nightly-YYYYMMDD.log
# (logs/nightly-YYYYMMDD-SEED.log for a run with LMRA_SEED set: another run the same day).
set -u
LMRA_HOME="${LMRA_HOME:-/srv/lmra}"                # holds nightly.toml, .venv/, reports/ and logs/
LMRA_CONFIG="${LMRA_CONFIG:-nightly.toml}"
LMRA_EXPORTS="${LMRA_EXPORTS:-/srv/dashboards/lmra}"  # one Parquet folder per run: the night's date (-SEED: another run that day)
LMRA_METRICS="${LMRA_METRICS:-/var/lib/node_exporter/textfile_collector}"  # lmra_<name>.prom goes here
LMRA_ENV_FILE="${LMRA_ENV_FILE:-/etc/lmra/env}"    # API keys as KEY=value lines (mode 600), if readable
LMRA_AUDIT_ARGS="${LMRA_AUDIT_ARGS:-}"            # more audit flags split at spaces, no quotes, e.g. "--gate max_overall_ci_high=0.05"
cd "$LMRA_HOME" 2>/dev/null || {                   # (no log without it: said on stderr, which cron mails)
  echo "nightly.sh: LMRA_HOME '$LMRA_HOME' is not a folder this user can enter: set LMRA_HOME to the folder" \
       "holding $LMRA_CONFIG, .venv/, reports/ and logs/ — nothing was audited, no log was written" >&2; exit 1; }
night="$(date -u +%Y%m%d)"
case "${LMRA_SEED:-0}" in *[!0-9]*) echo "nightly.sh: LMRA_SEED '$LMRA_SEED' is not a whole number" \
  "(it names the run's log and export folder) — nothing was audited, no log was written" >&2; exit 2;; esac
seed="${LMRA_SEED:-$night}"                        # another run the same day: LMRA_SEED=<its own>
exports="$LMRA_EXPORTS/$night${LMRA_SEED:+-$LMRA_SEED}"
log="nightly-$night${LMRA_SEED:+-$LMRA_SEED}.log"  # another run the same day: its own log
mkdir -p logs || exit 1
ln -sfn "$log" logs/latest.log                     # the newest run's log, for reading

run_status() {  # exit 0 when the run folder $1 finished complete, 3 when not, 1 when unreadable
  python -c 'import json, sys; sys.exit(3 * (json.load(open(sys.argv[1]))["run_status"] != "complete"))' "$1/summary.json"
}

nightly() {
  # Ctrl-C or a stop (SIGINT/SIGTERM to the job's processes: a terminal, systemd, a CI runner)
  # stops the audit, which keeps its answered calls (exit 130); this shell waits for it and ends
  # the log with its exit status instead of dying first
  trap 'echo "nightly.sh: stop signal: the audit stops, keeping its answered calls" >&2' INT TERM
  echo "=== nightly $(date -u) ==="
  if [ -r "$LMRA_ENV_FILE" ]; then                # export every KEY=value of the file
    set -a; . "$LMRA_ENV_FILE" || { echo "=== nightly.sh: exit status 1 (cannot read $LMRA_ENV_FILE) ==="; return 1; }
    set +a
  else                                               # said: a key then "not set" names no file
    echo "nightly.sh: $LMRA_ENV_FILE is missing or not readable by $(id -un): API keys come from the environment only"
  fi
  . "${LMRA_VENV:-.venv}/bin/activate" || { echo "=== nightly.sh: exit status 1 (no venv at ${LMRA_VENV:-.venv}) ==="; return 1; }
  read -ra audit_args <<< "$LMRA_AUDIT_ARGS"
  run_dir_file=last-run-dir.txt                   # the audit writes its run folder's path here
  rm -f "$run_dir_file"                           # (also when a bad flag stops lmra before it reads any)
  lmra audit --config "$LMRA_CONFIG" --seed "$seed" --baseline pinned --margin 0.01 --no-progress \
             --run-dir-file "$run_dir_file" ${audit_args[@]+"${audit_args[@]}"}
  status=$?
  case $status in 126|127)  # the shell's: lmra did not start (said, as the log's last line gives only the number)
    echo "nightly.sh: the lmra command could not be run ($([ "$status" = 127 ] && echo "not found" ||
          echo "not executable")): is lmra installed in ${LMRA_VENV:-.venv}? — nothing was audited" >&2 ;; esac
  run_dir="$(cat "$run_dir_file" 2>/dev/null)"     # empty if the audit stopped before making one
  case $status in  # a complete run: export exactly this one, and its metrics
    0|3|5|6) lmra export "$run_dir" --format parquet --out "$exports" \
             || echo "nightly.sh: export of $run_dir failed" >&2
             lmra export "$run_dir" --format prometheus --out "$LMRA_METRICS" \
             || echo "nightly.sh: metrics of $run_dir failed" >&2 ;;
    2) if [ -n "$run_dir" ]; then  # audited, but no verdict (check refused, nothing tested): its
         # tables, if complete, and its metrics — not a replay's (--skip-replay: they would hide its night's)
         if run_status "$run_dir" 2>/dev/null; then
           lmra export "$run_dir" --format parquet --out "$exports" --skip-replay \
           || echo "nightly.sh: export of $run_dir failed" >&2
         fi
         lmra export "$run_dir" --format prometheus --out "$LMRA_METRICS" --skip-replay \
         || echo "nightly.sh: metrics of $run_dir failed" >&2  # say so
       fi ;;
    1) if [ -f "$run_dir/summary.json" ]; then  # a partial night: its numbers, lmra_run_status "partial"
         run_status "$run_dir" 2>/dev/null
         case $? in  # 0: complete, exit 1 after it (the warehouse failed): its Parquet too, as any complete night's
           0) lmra export "$run_dir" --format parquet --out "$exports" \
              || echo "nightly.sh: export of $run_dir failed" >&2 ;;
           3) ;;      # partial: its metrics only (below)
           *) echo "nightly.sh: $run_dir/summary.json could not be read: no Parquet export" >&2 ;;
         esac
         lmra export "$run_dir" --format prometheus --out "$LMRA_METRICS" \
         || echo "nightly.sh: metrics of $run_dir failed" >&2  # (a failed night has none: alert on staleness)
       fi ;;
  esac
  if [ -n "$run_dir" ]; then  # reports/history.html: a partial night drawn hollow, a failed one left out;
    # the nights of this config's run name (not of the newest run's: an ad-hoc audit in the same reports/)
    name="$(python -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["name"])' \
            "$run_dir/config.toml" 2>/dev/null)"
    lmra report --history --reports-dir "$(dirname "$run_dir")" ${name:+--name "$name"} \
                --out "$(dirname "$run_dir")/history.html" || echo "nightly.sh: history page failed" >&2
  fi
  echo "=== nightly.sh: exit status $status ==="
  return "$status"
}
trap ':' INT TERM                                 # (the script too waits for the pipeline)
# tee ignores the stop signals: it writes the audit's last lines, then ends with the pipe
nightly 2>&1 | (trap '' INT TERM; exec tee -a "logs/$log")
exit "${PIPESTATUS[0]}"
