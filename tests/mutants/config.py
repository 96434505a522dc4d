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
         old="if (limits_reload(d->limits, c) == OTP_OK)",
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
]
