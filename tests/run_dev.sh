#!/bin/sh
# make run: a private redis-server and otpd with configs/dev.json, messages going to run/dev/sms.jsonl. The examples
# are printed once otpd answers (not before it could refuse to start). Ctrl-C stops both; from another terminal,
# `kill -HUP $(cat run/dev/otpd.pid)` reloads configs/dev.json and `kill $(cat run/dev/otpd.pid)` stops.
# OTPD_DEV_PORT and OTPD_DEV_REDIS_PORT move the ports (the listen address in the config is rewritten into
# run/dev/dev.json when they do).
set -eu
cd "$(dirname "$0")/.."
mkdir -p run/dev
PORT=${OTPD_DEV_PORT:-8080}
REDIS_PORT=${OTPD_DEV_REDIS_PORT:-6399}
: "${OTPD_SECRET:=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
: "${OTPD_KEY_LOGIN_WEB:=dev-key-login-web-0001}"
: "${OTPD_KEY_OPS:=dev-key-ops-0001}"
export OTPD_SECRET OTPD_KEY_LOGIN_WEB OTPD_KEY_OPS

CONFIG=configs/dev.json
if [ "$PORT" != 8080 ] || [ "$REDIS_PORT" != 6399 ]; then
    sed -e "s/127.0.0.1:8080/127.0.0.1:$PORT/" -e "s/127.0.0.1:6399/127.0.0.1:$REDIS_PORT/" configs/dev.json \
        > run/dev/dev.json
    CONFIG=run/dev/dev.json
fi

# The append-only file, as production runs it: /readyz then has nothing to warn about.
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$PWD/run/dev" --save "" --appendonly yes \
    --maxmemory-policy noeviction --daemonize no --logfile "$PWD/run/dev/redis.log" &
REDIS_PID=$!
echo "$REDIS_PID" > run/dev/redis.pid
OTPD_PID=
stop() {
    [ -n "$OTPD_PID" ] && kill "$OTPD_PID" 2>/dev/null && wait "$OTPD_PID" 2>/dev/null || true
    kill "$REDIS_PID" 2>/dev/null && wait "$REDIS_PID" 2>/dev/null || true
    rm -f run/dev/otpd.pid run/dev/redis.pid
}
trap stop EXIT
trap 'exit 0' INT TERM
for i in $(seq 50); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done

bin/otpd -c "$CONFIG" &
OTPD_PID=$!
echo "$OTPD_PID" > run/dev/otpd.pid
up=
for i in $(seq 100); do
    kill -0 "$OTPD_PID" 2>/dev/null || break
    if curl -fs "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1; then up=1; break; fi
    sleep 0.1
done
if [ -z "$up" ]; then
    echo "make run: otpd did not start (its reason is above)" >&2
    exit 1
fi

cat <<MSG

otpd (dev) answers on http://127.0.0.1:$PORT; redis on 127.0.0.1:$REDIS_PORT; messages go to run/dev/sms.jsonl.
Try, from another terminal:
  curl -s -X POST http://127.0.0.1:$PORT/v1/otp -H 'Authorization: Bearer $OTPD_KEY_LOGIN_WEB' \\
       -H 'Content-Type: application/json' -d '{"phone":"+919812345678"}'
  tail -n 1 run/dev/sms.jsonl
  curl -s -X POST http://127.0.0.1:$PORT/v1/otp/verify -H 'Authorization: Bearer $OTPD_KEY_LOGIN_WEB' \\
       -H 'Content-Type: application/json' -d '{"phone":"+919812345678","code":"<the code>"}'
  OTPCTL_KEY=$OTPD_KEY_OPS bin/otpctl -s http://127.0.0.1:$PORT block list
  bin/otpctl verify --db run/dev/ledger.db
Reload the config: kill -HUP \$(cat run/dev/otpd.pid)    Stop: Ctrl-C here, or kill \$(cat run/dev/otpd.pid)
MSG
wait "$OTPD_PID" || true
OTPD_PID=
