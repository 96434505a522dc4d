"""Mutants for the provider adapters' requests (src/provider), each caught by
the unit suite test_provider, which checks every adapter's URL, headers and
body byte for byte without a server. Each a small plausible bug."""
MUTANTS = [
    dict(name="provider-unit-kannel-dlr-url-unescaped",
         file="src/provider/kannel.c",
         old='kannel_param(req->url, sizeof(req->url), "dlr-url", dlr);',
         new='snprintf(req->url + strlen(req->url), sizeof(req->url) - strlen(req->url), "&dlr-url=%s", dlr) < 0;',
         test="unit:test_provider",
         why="the report URL goes into the query raw: its & and = split it into Kannel parameters of their own, "
             "so Kannel calls back without the tag and every report is refused"),
    dict(name="provider-unit-twilio-from-service-swapped",
         file="src/provider/twilio.c",
         old='''(t->service[0] ? twilio_field(req->body, sizeof(req->body), "MessagingServiceSid", t->service)
                         : twilio_field(req->body, sizeof(req->body), "From", t->from))''',
         new='''(t->service[0] ? twilio_field(req->body, sizeof(req->body), "From", t->service)
                         : twilio_field(req->body, sizeof(req->body), "MessagingServiceSid", t->from))''',
         test="unit:test_provider",
         why="the field names are swapped: the service SID is sent as From and the number as MessagingServiceSid, "
             "and Twilio refuses every message"),
    dict(name="provider-unit-webhook-signature-body-only",
         file="src/provider/webhook.c",
         old="sha256_hmac(secret, strlen(secret), signed_text, nh + nb, mac);",
         new="sha256_hmac(secret, strlen(secret), signed_text + nh, nb, mac);",
         test="unit:test_provider",
         why="the HMAC covers the body without the timestamp the header claims: a receiver's check fails, and "
             "a replay with a fresh t would pass one that signs the same way"),
]
