"""Mutants for phone numbers (src/base/phone.cc and where http.c and otp.c use
it): one spelling per number, validity, and the number-type gate. Each a
small plausible bug, and the test that must catch it."""
MUTANTS = [
    dict(name="phone-raw-spelling-downstream",
         file="src/http/http_body.c",
         old='if (json_object_set_new(j, "phone", json_string(pi->e164)) != 0) {',
         new='if (0) {',
         test="test_api_phone.TrunkPrefixTest",
         why="the number is checked but the caller's spelling is keyed, priced and sent: "
             "+9109812345699 becomes a second phone with its own limits"),
    dict(name="phone-possible-is-valid",
         file="src/base/phone.cc",
         old="""    if (type == PhoneNumberUtil::UNKNOWN)
        return PHONE_INVALID_FOR_REGION;""",
         new="""    if (!u->IsPossibleNumber(n))
        return PHONE_INVALID_FOR_REGION;""",
         test="unit:test_phone",
         why="a number of the right length but not assigned (+91009812345699, +447700900123) is accepted"),
    dict(name="phone-type-table-swapped",
         file="src/base/phone.cc",
         old="""    {PhoneNumberUtil::FIXED_LINE, PHONE_TYPE_FIXED_LINE},
    {PhoneNumberUtil::MOBILE, PHONE_TYPE_MOBILE},""",
         new="""    {PhoneNumberUtil::FIXED_LINE, PHONE_TYPE_MOBILE},
    {PhoneNumberUtil::MOBILE, PHONE_TYPE_FIXED_LINE},""",
         test="unit:test_phone",
         why="fixed lines are reported as mobiles, so phone.types lets landlines through"),
    dict(name="phone-type-not-the-checked-one",
         file="src/base/phone.cc",
         old="out->type = phone_type_of(type);",
         new="out->type = phone_type_of(PhoneNumberUtil::MOBILE);",
         test="unit:test_phone",
         why="the one GetNumberType that decides validity is not the type reported: every valid number "
             "reads as a mobile, so phone.types lets landlines and toll-free numbers through"),
    dict(name="phone-input-not-strict",
         file="src/base/phone.cc",
         old="(digits = strspn(s + 1, \"0123456789\")) > 0 && s[1 + digits] == '\\0'",
         new="(digits = strspn(s + 1, \"0123456789\")) > 0",
         test="unit:test_phone",
         why="libphonenumber's lenient parse takes spaces, letters, extensions and tel: URIs"),
    dict(name="phone-type-gate-after-rules",
         file="src/otp/otp_gate.c",
         old="""    if (!type_served(o, rq, out))
        goto refused;""",
         new="""    if (0)
        goto refused;""",
         test="test_api_phone.NumberTypeTest",
         why="issue ignores phone.types: toll-free and premium-rate numbers are sent codes"),
    dict(name="phone-type-default-all",
         file="src/base/conftab.c",
         old="c->limits.phone_types = PHONE_TYPES_DEFAULT;",
         new="c->limits.phone_types = ~0u;",
         test="unit:test_config",
         why="without phone.types every number type is served"),
    dict(name="phone-canonical-not-settled",
         file="src/base/phone.cc",
         old="err = phone_parse_canon(s, &info);",
         new="err = phone_parse_lib(s, &info);",
         test="unit:test_phone",
         why="one parse only: '+520113463567418' keys as '+5213463567418', whose own parse is '+523463567418' "
             "(two keys, two sets of limits, for one phone)"),
]
