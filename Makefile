# otpd: one plain Makefile. `make` builds bin/otpd and bin/otpctl;
# `make test` installs what is missing, builds and runs every suite;
# `make run` starts a private redis-server and otpd with configs/dev.json.
# SAN=1 builds everything with AddressSanitizer and UBSan (into build/san); COV=1 with gcov counters
# (into build/cov, see `make coverage`).

CC      ?= cc
PKGS    := libmicrohttpd libcurl sqlite3 hiredis jansson libsodium
# libcrypto: HMAC-SHA1 for Twilio's callback signatures (libsodium has no SHA-1); libcurl loads it already.
PKGS    += libcrypto
# gnutls: the certificate HTTPS serves (src/http/tls.c); libmicrohttpd does TLS through it already.
PKGS    += gnutls
WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wpointer-arith -Wcast-qual \
           -Wformat=2 -Wvla
# OPT is the plain build's optimisation and debug info. The mutation gate builds its scratch copies with OPT=-O0:
# they compile three times faster and behave the same.
OPT     ?= -O2 -g
CFLAGS  ?= $(OPT)
CFLAGS  += -std=c11 -D_GNU_SOURCE -pthread $(WARN) -MMD -MP
ifeq ($(WERROR),1)
CFLAGS  += -Werror
endif
PKG_CFLAGS = $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs $(PKGS) 2>/dev/null)
LDLIBS  += $(PKG_LIBS) -pthread -lm
# libphonenumber (C++, no pkg-config file) behind src/base/phone.cc, the only C++ file; its .so brings ICU and
# abseil, and its headers inline protobuf.
PHONE_LIBS := -lphonenumber -lprotobuf -lstdc++
LDLIBS  += $(PHONE_LIBS)

ifeq ($(SAN),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1
LDFLAGS += -fsanitize=address,undefined
B       := build/san
else ifeq ($(COV),1)
# gcov counters (`make coverage`); -O0 so that lines and branches map to the source.
CFLAGS  += --coverage -O0
LDFLAGS += --coverage
B       := build/cov
else
B       := build/rel
endif
BIN     := bin
PREFIX  ?= /usr/local
# The git describe at build time, for `otpd --version` (a source tree without git says "unknown"). Expanded only
# where version.h is made, and not at all when given on the command line (the mutation gate's copies).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo unknown)

BASE_SRC     := src/base/rc.c src/base/sha256.c src/base/duration.c src/base/clock.c src/base/log.c \
                src/base/config.c src/base/config_read.c src/base/config_rows.c src/base/conftab.c \
                src/base/config_net.c src/base/config_otp.c src/base/config_rules.c src/base/config_cost.c \
                src/base/config_provider.c src/base/timestamp.c src/base/metrics.c src/base/wipe.c \
                src/base/phone_mask.c src/base/msgstate.c src/base/breaker.c src/base/route.c \
                src/base/config_network.c
# The only C++: libphonenumber's wrapper. Same flags as the C, less the C-only ones.
CXX_SRC      := src/base/phone.cc
CXXFLAGS      = $(filter-out -std=c11 -Wstrict-prototypes -Wmissing-prototypes,$(CFLAGS)) -std=c++17
STORE_SRC    := src/store/store.c
LEDGER_SRC   := src/ledger/ledger.c src/ledger/ledger_queue.c src/ledger/ledger_writer.c src/ledger/ledger_retention.c \
                src/ledger/ledger_state.c src/ledger/chain.c src/ledger/sweep.c \
                src/ledger/ro.c src/ledger/history.c src/ledger/summary.c src/ledger/chaincheck.c
PROVIDER_SRC := src/provider/provider.c src/provider/file.c src/provider/webhook.c src/provider/kannel.c \
                src/provider/twilio.c
LIMITS_SRC   := src/limits/limits.c src/limits/limits_rules.c src/limits/limits_keys.c src/limits/limits_args.c \
                src/limits/limits_issue.c src/limits/limits_verify.c src/limits/limits_undo.c \
                src/limits/limits_cache.c src/limits/limits_money.c src/limits/fraud.c src/limits/rcache.c
ADMIN_SRC    := src/admin/admin.c src/admin/admin_net.c src/admin/admin_body.c src/admin/admin_rows.c \
                src/admin/admin_snap.c
PACER_SRC    := src/pacer/pacer.c src/pacer/pacer_qthread.c src/pacer/pacer_jobs.c src/pacer/pacer_send.c \
                src/pacer/pacer_money.c src/pacer/pacer_metrics.c src/pacer/queue.c src/pacer/schedule.c src/pacer/xfer.c \
                src/pacer/pacer_failover.c src/pacer/lanes.c
OTP_SRC      := src/otp/code.c src/otp/sms.c src/otp/idem.c src/otp/otp.c src/otp/otp_gate.c src/otp/otp_text.c src/otp/otp_metrics.c src/otp/otp_ready.c \
                src/otp/report.c
V2_SRC       := src/v2/v2.c src/v2/v2_rl.c src/v2/v2_ver.c src/v2/v2_error.c src/v2/v2_form.c src/v2/v2_json.c
HTTP_SRC     := src/http/http.c src/http/http_route.c src/http/http_reply.c src/http/http_body.c src/http/http_api.c \
                src/http/http_admin.c src/http/http_probe.c src/http/framing.c src/http/listener.c src/http/logsum.c \
                src/http/problem.c src/http/tls.c src/http/http_v2.c src/http/http_v2_ver.c \
                src/http/http_v2_rl.c
LIB_SRC      := $(BASE_SRC) $(STORE_SRC) $(LEDGER_SRC) $(PROVIDER_SRC) $(LIMITS_SRC) $(ADMIN_SRC) $(PACER_SRC) $(OTP_SRC) \
                $(V2_SRC) $(HTTP_SRC)
LUA          := src/limits/issue.lua src/limits/verify.lua src/limits/refund.lua src/limits/reserve.lua \
                src/limits/headroom.lua \
                src/pacer/queue.lua src/pacer/slot.lua src/admin/admin.lua src/v2/v2.lua
LUA_H        := $(LUA:.lua=.lua.h)

# One line a module, so that a new suite is one line.
UNIT_TESTS   := test_duration test_timestamp test_rc test_log test_sha256 test_phone test_config test_config_rows
UNIT_TESTS   += test_problem test_logsum test_http_body
UNIT_TESTS   += test_code test_sms test_metrics
UNIT_TESTS   += test_msgstate test_breaker test_route
UNIT_TESTS   += test_limits_keys test_limits_args test_fraud test_rcache
UNIT_TESTS   += test_admin
UNIT_TESTS   += test_schedule
UNIT_TESTS   += test_ledger
UNIT_TESTS   += test_provider
UNIT_TESTS   += test_v2
UNIT_BINS    := $(addprefix $(B)/tests/,$(UNIT_TESTS))

LIB_OBJ      := $(LIB_SRC:%.c=$(B)/%.o) $(CXX_SRC:%.cc=$(B)/%.o)
LIB          := $(B)/libotpd.a
TLIB_OBJ     := $(LIB_SRC:%.c=$(B)/t/%.o) $(CXX_SRC:%.cc=$(B)/t/%.o)
TLIB         := $(B)/libotpd_test.a

.PHONY: all test unit unit-bins integration run deps deps-test config-doc lint bench clean fmt fuzz mutate coverage \
        coverage-report install npm-tools openapi-lint size FORCE
all: $(BIN)/otpd $(BIN)/otpctl $(BIN)/fake_provider $(BIN)/epoll_slow.so $(BIN)/spawn_slow.so

$(B)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(PKG_CFLAGS) -c $< -o $@

$(B)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# Lua scripts are embedded as C strings: one line of Lua, one line of C. issue.lua and verify.lua start with
# prelude.lua, what both share: its lines come first in their string (tests/integration/luascript.py reads them so).
src/limits/issue.lua.h src/limits/verify.lua.h: src/limits/prelude.lua
src/limits/%.lua.h: src/limits/%.lua
	@{ echo "static const char limits_$*_lua[] ="; cat $(filter %/prelude.lua,$^) $< | \
	   sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/'; echo "    ;"; } > $@.tmp && mv $@.tmp $@
src/pacer/%.lua.h: src/pacer/%.lua
	@{ echo "static const char pacer_$*_lua[] ="; \
	   sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $<; echo "    ;"; } > $@.tmp && mv $@.tmp $@
src/admin/%.lua.h: src/admin/%.lua
	@{ echo "static const char admin_$*_lua[] ="; \
	   sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $<; echo "    ;"; } > $@.tmp && mv $@.tmp $@
src/v2/%.lua.h: src/v2/%.lua
	@{ echo "static const char v2_$*_lua[] ="; \
	   sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $<; echo "    ;"; } > $@.tmp && mv $@.tmp $@
# Generated headers exist before any object is compiled; after that each object's -MMD file names the ones it
# includes, so a changed script rebuilds exactly its users.
$(LIB_OBJ) $(TLIB_OBJ): | $(LUA_H) src/ledger/schema.h

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# bin/ holds one build at a time; the stamp makes a switch of SAN relink.
MODE := $(BIN)/.mode-$(notdir $(B))
$(MODE):
	@mkdir -p $(BIN); rm -f $(BIN)/.mode-*; touch $@

# Rewritten only when the version changes, so a rebuild relinks only then.
$(B)/version.h: FORCE
	@mkdir -p $(dir $@); echo '#define OTPD_VERSION "$(VERSION)"' > $@.tmp; \
	 cmp -s $@.tmp $@ && rm -f $@.tmp || mv $@.tmp $@
$(B)/cmd/otpd/main.o: $(B)/version.h
$(B)/cmd/otpd/main.o: CFLAGS += -include $(B)/version.h

$(BIN)/otpd: $(B)/cmd/otpd/main.o $(LIB) $(MODE)
	$(CC) $(LDFLAGS) -o $@ $(filter-out $(MODE),$^) $(LDLIBS)

# otpctl links libcurl (PKGS) for its own HTTP client, cmd/otpctl/http.c.
OTPCTL_SRC   := cmd/otpctl/main.c cmd/otpctl/flags.c cmd/otpctl/audit.c cmd/otpctl/ledger.c cmd/otpctl/verify.c \
                cmd/otpctl/stats.c cmd/otpctl/simulate.c cmd/otpctl/sim_replay.c cmd/otpctl/sim_report.c \
                cmd/otpctl/simredis.c cmd/otpctl/tally.c cmd/otpctl/admin.c cmd/otpctl/http.c
$(BIN)/otpctl: $(OTPCTL_SRC:%.c=$(B)/%.o) $(LIB) $(MODE)
	$(CC) $(LDFLAGS) -o $@ $(filter-out $(MODE),$^) $(LDLIBS)

$(BIN)/fake_provider: $(B)/tests/fake_provider/fake_provider.o $(MODE)
	$(CC) $(LDFLAGS) -o $@ $(filter-out $(MODE),$^) $(LDLIBS)

# The tests' LD_PRELOAD shims (test_money_drain.py, test_http_hostile.py): built plain in
# every mode, since each only delays a call.
$(BIN)/epoll_slow.so: tests/shims/epoll_slow.c
	@mkdir -p $(BIN)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $@ $< -ldl
$(BIN)/spawn_slow.so: tests/shims/spawn_slow.c
	@mkdir -p $(BIN)
	$(CC) -shared -fPIC -O2 -Wall -Wextra -Werror -o $@ $< -ldl

# The ledger's migrations are embedded the same way as the Lua scripts.
src/ledger/schema.h: $(sort $(wildcard schema/*.sql))
	@{ echo "static const char *const ledger_migrations[] = {"; for f in $^; do \
	   sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/    "/' -e 's/$$/\\n"/' $$f; echo "    ,"; done; \
	   echo "};"; } > $@.tmp && mv $@.tmp $@

# The test build: the library again with -DOTPD_TESTING (into $(B)/t), where a UNITTEST function is external
# (src/base/unittest.h), so a cmocka suite reaches file-local code without the product exporting it.
$(B)/t/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DOTPD_TESTING $(PKG_CFLAGS) -c $< -o $@

$(B)/t/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -DOTPD_TESTING -c $< -o $@

$(TLIB): $(TLIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(B)/tests/unit/%.o: CFLAGS += -DOTPD_TESTING
# Kept, not deleted as intermediates: a relink after a library change then needs no recompile of the suite.
.SECONDARY: $(UNIT_TESTS:%=$(B)/tests/unit/%.o)
$(B)/tests/%: $(B)/tests/unit/%.o $(TLIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(shell pkg-config --libs cmocka)

# From Debian's archive. `make deps`: what building and running otpd need (`make run` on a fresh Debian 12 is
# `make deps all` and tests/run_dev.sh). `make deps-test`: what only the tests, lint, fuzzing, coverage and the
# bench add: cmocka, Kannel (test_kannel), promtool (prometheus: the metrics and alert-rule checks), clang
# (libFuzzer), Node and npm (the OpenAPI lint and Prism), wrk, cppcheck, gcovr, and Twilio's Python SDK
# (python3-twilio: the /v2 surface is tested with it).
DEB_PKGS      := build-essential pkg-config libmicrohttpd-dev libcurl4-openssl-dev libsqlite3-dev libhiredis-dev \
                 libjansson-dev libsodium-dev libssl-dev libgnutls28-dev libphonenumber-dev redis-server sqlite3 python3 curl
DEB_TEST_PKGS := libcmocka-dev kannel kannel-extras prometheus clang wrk cppcheck gcovr python3-twilio
# Node for the OpenAPI lint and Prism: Debian's nodejs and npm, unless a node and an npm are on PATH already
# (NodeSource's nodejs carries its own npm and conflicts with Debian's).
DEB_TEST_PKGS += $(if $(shell command -v node >/dev/null && command -v npm >/dev/null && echo y),,nodejs npm)
# Installs the packages of $(1) that dpkg does not list as installed (sudo when not root).
define deb_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | \
	  grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  if [ "$$(id -u)" -ne 0 ]; then SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
endef
deps:
	$(call deb_install,$(DEB_PKGS))

deps-test: deps
	$(call deb_install,$(DEB_TEST_PKGS))

unit-bins: $(UNIT_BINS)

unit: $(UNIT_BINS)
	@failed=0; for t in $(UNIT_BINS); do echo "== $$t"; $$t || failed=1; done; exit $$failed

# TEST_JOBS workers run the integration tests, a class at a time (their tests mostly wait on otpd, Redis and timers:
# six keep two cores busy); the modules that measure time or rates (SERIAL) run alone after them.
TEST_JOBS ?= 6
# The npm tools first (when npm is here): suites that use them (Prism, Twilio's Node SDK) would otherwise each
# install them, and workers running at once would race in build/npm.
integration: all $(if $(shell command -v npm 2>/dev/null),npm-tools)
	python3 tests/integration/run.py --jobs $(TEST_JOBS)

# The builds use every core (BUILD_JOBS); the unit suites then run one at a time.
BUILD_JOBS ?= $(shell nproc)
test: deps-test
	$(MAKE) -j$(BUILD_JOBS) all unit-bins
	$(MAKE) unit
	$(MAKE) openapi-lint
	$(MAKE) integration

# The npm tools that check docs/openapi.yaml, at the versions tests/openapi/package-lock.json pins (chosen to run on
# Debian 12's Node 18), from the npm registry into build/npm (no install scripts run).
NPM_DIR := build/npm
$(NPM_DIR)/.installed: tests/openapi/package.json tests/openapi/package-lock.json
	@command -v npm >/dev/null || { echo "npm is missing (make deps-test installs nodejs and npm)"; exit 1; }
	@mkdir -p $(NPM_DIR) && cp tests/openapi/package.json tests/openapi/package-lock.json $(NPM_DIR)/
	cd $(NPM_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	@touch $@
npm-tools: $(NPM_DIR)/.installed

# Redocly's recommended rules, warnings included (docs/redocly.yaml).
openapi-lint: $(NPM_DIR)/.installed
	$(NPM_DIR)/node_modules/.bin/redocly lint --config docs/redocly.yaml docs/openapi.yaml

# `make install PREFIX=/usr DESTDIR=pkg/`: the two binaries, the systemd unit (its paths follow PREFIX), an
# example config (its ledger under /var/lib/otpd, the unit's StateDirectory) and the docs, README.md at the top
# and docs/ beside it as in the source tree, so their links hold. The service user, /etc/otpd and the secrets are
# the operator's (see the unit).
DOC_FILES := docs/architecture.md docs/config.md docs/operations.md docs/contributing.md docs/rules.md \
             docs/providers.md docs/twilio-verify.md docs/openapi.yaml
DOC_DIR    = $(DESTDIR)$(PREFIX)/share/doc/otpd
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/otpd \
	  $(DOC_DIR)/docs/prometheus $(DOC_DIR)/docs/grafana
	install -m 0755 $(BIN)/otpd $(BIN)/otpctl $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|/usr/local|$(PREFIX)|g' packaging/otpd.service > $(DESTDIR)$(PREFIX)/lib/systemd/system/otpd.service
	chmod 0644 $(DESTDIR)$(PREFIX)/lib/systemd/system/otpd.service
	install -m 0644 configs/otpd.json $(DESTDIR)$(PREFIX)/share/otpd/otpd.json.example
	install -m 0644 README.md LICENSE $(DOC_DIR)/
	install -m 0644 $(DOC_FILES) $(DOC_DIR)/docs/
	install -m 0644 docs/prometheus/otpd.rules.yml $(DOC_DIR)/docs/prometheus/
	install -m 0644 docs/grafana/otpd.json $(DOC_DIR)/docs/grafana/

run: deps all
	sh tests/run_dev.sh

# Issue 13's table (bench/perf.py; saved in bench/results/). The older sections: python3 bench/run.py [section].
# bench/bare429.c is ceiling B: libmicrohttpd alone, with otpd's thread model.
build/bench/bare429: bench/bare429.c
	@mkdir -p $(dir $@)
	$(CC) -O2 -g -std=c11 -D_GNU_SOURCE -pthread $(WARN) $(shell pkg-config --cflags libmicrohttpd) -o $@ $< \
	  $(shell pkg-config --libs libmicrohttpd)

bench: deps-test all build/bench/bare429
	python3 bench/run.py perf

lint:
	python3 tests/layers.py
	@! grep -nE '\b(sprintf|strcpy|strcat|strtok|gmtime|localtime|atoi)\(' $$(git ls-files '*.c' '*.cc' '*.h') || \
	  { echo "banned call found"; exit 1; }
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability --inline-suppr \
	  --suppress=missingIncludeSystem -I src $(LIB_SRC) $(CXX_SRC) cmd/otpd/main.c $(OTPCTL_SRC)

# libFuzzer (clang) over the parsers: build/fuzz/fuzz_T for each T of FUZZ_TARGETS, from tests/fuzz/fuzz_T.c
# and the library built with OTPD_TESTING (UNITTEST functions visible) and ASan+UBSan. tests/fuzz/run.sh
# checks that every seed parses, then runs each target FUZZ_SECONDS (default 60) from tests/fuzz/corpus/T/
# copied to build/fuzz/; any crash fails. FUZZ_SECONDS=N to run longer, FUZZ_JOBS=N targets at once.
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 1
FUZZ_TARGETS := config body phone reply
FUZZ_CFLAGS  := -g -O1 -std=c11 -D_GNU_SOURCE -DOTPD_TESTING -pthread $(WARN) $(filter -Werror,$(CFLAGS)) \
                -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_OBJ     := $(LIB_SRC:%.c=build/fuzz/obj/%.o) $(CXX_SRC:%.cc=build/fuzz/obj/%.o)
.SECONDARY: $(FUZZ_OBJ)
build/fuzz/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP $(PKG_CFLAGS) -c $< -o $@
build/fuzz/obj/%.o: %.cc
	@mkdir -p $(dir $@)
	clang++ $(filter-out -std=c11 -Wstrict-prototypes -Wmissing-prototypes,$(FUZZ_CFLAGS)) -std=c++17 \
	  -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_OBJ): | $(LUA_H) src/ledger/schema.h
build/fuzz/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_OBJ)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -fsanitize-link-c++-runtime $(PKG_CFLAGS) -o $@ $< $(FUZZ_OBJ) $(LDLIBS)
fuzz: $(FUZZ_TARGETS:%=build/fuzz/fuzz_%)
	FUZZ_JOBS=$(FUZZ_JOBS) sh tests/fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The mutation gate (tests/mutants/): MUTANTS="name ..." picks mutants by substring, MUTATE_JOBS copies in parallel,
# MUTATE_FLAGS passes more (--no-baseline, --timeout S).
MUTATE_JOBS ?= 2
mutate:
	python3 tests/mutants/run.py --jobs $(MUTATE_JOBS) $(MUTATE_FLAGS) $(MUTANTS)

# Line and branch coverage of src/ per module, unit plus integration tests, from a gcov build in build/cov
# (bin/ relinks to it through the mode stamp; the next plain `make` relinks back). Counts start from zero each
# run. Prints the table even when a test fails, then fails. `make coverage-report` prints it again from the
# counts; per-file detail with the missing lines: build/cov/coverage.txt.
COV_MODULES := base http otp limits admin pacer provider store ledger
coverage:
	@command -v gcovr >/dev/null || { echo "coverage needs gcovr (make deps)"; exit 1; }
	@mkdir -p build/cov && find build/cov -name '*.gcda' -delete
	$(MAKE) COV=1 all unit-bins
	@st=0; $(MAKE) --no-print-directory COV=1 unit || st=1; \
	python3 tests/integration/run.py || st=1; \
	$(MAKE) --no-print-directory coverage-report || st=1; exit $$st

coverage-report:
	@gcovr -r . build/cov --filter 'src/' --exclude-unreachable-branches \
	  --csv build/cov/coverage.csv --txt build/cov/coverage.txt
	@awk -F, -v mods="$(COV_MODULES)" ' \
	  NR > 1 { split($$1, p, "/"); m = p[2]; lt[m] += $$2; lc[m] += $$3; bt[m] += $$5; bc[m] += $$6; \
	           LT += $$2; LC += $$3; BT += $$5; BC += $$6 } \
	  function pct(c, t) { return t ? sprintf("%5.1f%%", 100 * c / t) : "     -" } \
	  function row(n, a, b, c, d) { printf "%-14s %6d %6d %6s   %8d %6d %6s\n", n, a, b, pct(b, a), c, d, pct(d, c) } \
	  END { printf "%-14s %6s %6s %6s   %8s %6s %6s\n", "module", "lines", "hit", "", "branches", "taken", ""; \
	        n = split(mods, ms, " "); for (i = 1; i <= n; i++) row("src/" ms[i], lt[ms[i]], lc[ms[i]], bt[ms[i]], bc[ms[i]]); \
	        row("src/ (total)", LT, LC, BT, BC) }' build/cov/coverage.csv

# docs/config.md's configuration key table, from the key table in src/base/config_rows.c.
config-doc: $(BIN)/otpd
	python3 tests/config_table.py

# The longest files and functions against the house's bounds (700 and 80 lines): a warning, never a gate.
size:
	@python3 tests/size.py

fmt:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build bin $(LUA_H) src/ledger/schema.h

# Only this mode's dependency files: build/ also holds the mutation gate's scratch trees (build/mutate).
-include $(shell find $(B) -name '*.d' 2>/dev/null)

FORCE:
