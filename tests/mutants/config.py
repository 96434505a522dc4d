"""Mutants for config and its reload (src/base/config.c, the SIGHUP path in cmd/otpd/main.c and limits_reload):
each a small plausible bug, and the test that must catch it."""
MUTANTS = [
    dict(name="reload-keeps-old-prices-and-caps",
         file="src/limits/limits.c",
         old="""    old = l->cur;
    l->cur = r;""",
         new="""    old = l->cur;
    { /* the new rules, but the old prices and caps (the old snapshot frees the new ones) */
        struct cfg_price *np = r->prices;
        struct cfg_cap *nc = r->caps;
        size_t nnp = r->n_prices, nnc = r->n_caps;
        r->prices = old->prices, r->n_prices = old->n_prices, r->caps = old->caps, r->n_caps = old->n_caps;
        old->prices = np, old->n_prices = nnp, old->caps = nc, old->n_caps = nnc;
    }
    l->cur = r;""",
         test="test_limits_more.ReloadCostTest",
         why="a reload that ignores new prices and cost caps"),
    dict(name="reload-not-applied",
         file="cmd/otpd/main.c",
         old="if (limits_reload(d->limits, &c->limits) == OTP_OK)",
         new="if (c != NULL)",
         test="test_limits.ReloadTest",
         why="SIGHUP logs 'reloaded' but the old rules stay"),
    dict(name="rule-field-by-position",
         file="src/base/config.c",
         old="h %= 62 * 62;",
         new="h = (h + (uint32_t)i) % (62 * 62);",
         test="test_limits_more.ReloadReorderTest",
         why="a rule's Redis field depends on its position, so reordering rules on reload resets them"),
    dict(name="star-price-overrides-prefix",
         file="src/base/config.c",
         old="""            if (best_len == 0)
                best = p->price_minor;""",
         new="""            best = p->price_minor;""",
         test="test_limits.CostCapTest.test_cap_inr",
         why="the \"*\" price wins over a matching prefix listed before it"),
    dict(name="config-unknown-key-no-guess",
         file="src/base/conftab.c",
         old="if (best != NULL && best_d <= 2 && best_d < strlen(key))",
         new="if (best != NULL && best_d <= 0 && best_d < strlen(key))",
         test="test_config_table.CheckMessagesTest.test_unknown_keys_name_the_nearest",
         why="an unknown key never names the nearest allowed one"),
    dict(name="config-unknown-key-wild-guess",
         file="src/base/conftab.c",
         old="if (best != NULL && best_d <= 2 && best_d < strlen(key))",
         new="if (best != NULL)",
         test="test_config_table.CheckMessagesTest.test_unknown_keys_name_the_nearest",
         why="a key like no other is given a guess anyway"),
    dict(name="config-diff-ignores-restart-keys",
         file="cmd/otpd/main.c",
         old="    if (!reload)\n        log_event(LOG_WARN, \"config.restart_needed\",",
         new="    if (!reload && 0)\n        log_event(LOG_WARN, \"config.restart_needed\",",
         test="test_config_table.ReloadTest.test_ttl_and_template_reload_and_the_rest_is_named",
         why="a changed key that needs a restart is ignored silently on SIGHUP"),
    dict(name="config-reload-template-not-applied",
         file="src/otp/otp.c",
         old="    snprintf(o->tmpl, sizeof(o->tmpl), \"%s\", c->tmpl);",
         new="    if (o->tmpl[0] == '\\0')\n        snprintf(o->tmpl, sizeof(o->tmpl), \"%s\", c->tmpl);",
         test="test_config_table.ReloadTest.test_ttl_and_template_reload_and_the_rest_is_named",
         why="SIGHUP logs the template as applied but messages keep the old text"),
    dict(name="config-check-reads-secrets",
         file="cmd/otpd/main.c",
         old="    if (check)\n        config_set_secrets(0);",
         new="    if (check)\n        config_set_secrets(1);",
         test="test_config_table.CheckMessagesTest.test_check_needs_no_secret",
         why="otpd --check fails on a machine without the service's secrets"),
    dict(name="config-dur-bound-off-by-one",
         file="src/base/conftab.c",
         old="if ((r->lo > 0 && v < r->lo) || (r->hi > 0 && v > r->hi)) {",
         new="if ((r->lo > 0 && v < r->lo) || (r->hi > 0 && v >= r->hi)) {",
         test="unit:test_config",
         why="a duration at its upper bound is refused (otp.ttl 1h)"),
]
