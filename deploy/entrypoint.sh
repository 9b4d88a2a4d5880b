#!/bin/sh
# The Turnwire image's entrypoint (deploy/Dockerfile). The first argument says what to run:
#
#   coordinator [serve flags]  check the configuration, then exec turnwire-coordinator serve
#   runner [serve flags]       check the configuration, then exec turnwire-runner serve
#   migrate [flags]            upgrade the coordinator journal and exit (a one-shot service)
#   health                     the image's HEALTHCHECK: gRPC health of the service started
#   anything else              run as given (turnwire certs ..., turnwire-coordinator tokens ...)
#
# Configuration comes from flags and TURNWIRE_* variables, as the services read them.
# "Migrate when asked": TURNWIRE_MIGRATE=1 makes the coordinator upgrade its journal
# before it opens it (serve's own --migrate); --check-config then accepts an older schema.
# A runner upgrades its store itself when it opens it.
#
# --check-config reports every problem at once and exits 2: the container stops there,
# its log saying what to fix, instead of failing half-way through starting.
# The service is exec'd: it is the container's main process and gets SIGTERM itself.
set -eu

# Where `health` finds the service and the flags it was started with (one NUL-ended
# argument each, so no flag value is ever split or re-quoted).
state="${TMPDIR:-/tmp}/turnwire-entrypoint"

case "${1:-}" in
coordinator | runner)
    program="turnwire-$1"
    shift
    "$program" serve --check-config "$@"
    printf '%s\0' "$program" "$@" >"$state.tmp"
    mv "$state.tmp" "$state"
    exec "$program" serve "$@"
    ;;
migrate)
    shift
    exec turnwire-coordinator migrate "$@"
    ;;
health)
    if [ ! -s "$state" ]; then
        echo "health: no service was started by this entrypoint yet" >&2
        exit 1
    fi
    # xargs -0 gives the saved arguments back as they were: PROGRAM FLAG...
    exec xargs -0 sh -c 'program=$1; shift; exec "$program" health "$@"' health <"$state"
    ;;
"")
    echo "usage: turnwire-entrypoint coordinator|runner|migrate|health [flags], or a command" >&2
    exit 2
    ;;
*)
    exec "$@"
    ;;
esac
