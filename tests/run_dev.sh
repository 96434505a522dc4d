#!/bin/sh
# make run: a private redis-server and otpd with configs/dev.json, messages
# going to run/dev/sms.jsonl. Ctrl-C stops both.
set -eu
cd "$(dirname "$0")/.."
mkdir -p run/dev
REDIS_PORT=6399
: "${OTPD_SECRET:=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
: "${OTPD_KEY_LOGIN_WEB:=dev-key-login-web-0001}"
export OTPD_SECRET OTPD_KEY_LOGIN_WEB

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$PWD/run/dev" --save "" --appendonly no \
    --daemonize no --logfile "$PWD/run/dev/redis.log" &
REDIS_PID=$!
trap 'kill $REDIS_PID 2>/dev/null; wait $REDIS_PID 2>/dev/null || true' EXIT INT TERM
for i in $(seq 50); do
    redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
    sleep 0.1
done

cat <<MSG
otpd (dev) on http://127.0.0.1:8080; redis on 127.0.0.1:$REDIS_PORT; messages go to run/dev/sms.jsonl.
Try, from another terminal:
  curl -s -X POST http://127.0.0.1:8080/v1/otp -H 'Authorization: Bearer $OTPD_KEY_LOGIN_WEB' \\
       -H 'Content-Type: application/json' -d '{"phone":"+919812345678"}'
  tail -n 1 run/dev/sms.jsonl
  curl -s -X POST http://127.0.0.1:8080/v1/otp/verify -H 'Authorization: Bearer $OTPD_KEY_LOGIN_WEB' \\
       -H 'Content-Type: application/json' -d '{"phone":"+919812345678","code":"<the code>"}'
MSG
bin/otpd -c configs/dev.json
