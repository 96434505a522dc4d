/*
 * admin_net: client addresses and CIDR ranges, parsed, matched and
 * written back in one spelling. Pure. A parse runs per admin row written
 * or read and per request checked against a client_ip block; a match per
 * such block and request.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "admin_int.h"

enum otp_rc admin_net_parse(const char *s, struct admin_net *out)
{
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    char text[INET6_ADDRSTRLEN + 8];
    const char *slash;
    unsigned char b[16];
    int bits = -1, max, i;

    memset(out, 0, sizeof(*out));
    if (s == NULL || strlen(s) >= sizeof(text))
        return OTP_EINVAL;
    snprintf(text, sizeof(text), "%s", s);
    if ((slash = strchr(s, '/')) != NULL) {
        const char *p = slash + 1;
        text[slash - s] = '\0';
        if (*p == '\0' || strlen(p) > 3)
            return OTP_EINVAL;
        for (bits = 0; *p; p++) {
            if (*p < '0' || *p > '9')
                return OTP_EINVAL;
            bits = bits * 10 + (*p - '0');
        }
    }
    if (inet_pton(AF_INET, text, b) == 1) {
        out->family = 4;
        memcpy(out->addr, b, 4);
        max = 32;
    } else if (inet_pton(AF_INET6, text, b) == 1) {
        if (memcmp(b, mapped, sizeof(mapped)) == 0) {
            /* ::ffff:a.b.c.d/N is a.b.c.d/(N - 96): keyed as IPv4, as requests are. */
            out->family = 4;
            memcpy(out->addr, b + 12, 4);
            max = 32;
            if (bits >= 0 && (bits -= 96) < 0)
                return OTP_EINVAL;
        } else {
            out->family = 6;
            memcpy(out->addr, b, 16);
            max = 128;
        }
    } else {
        return OTP_EINVAL;
    }
    if (bits > max)
        return OTP_EINVAL;
    out->bits = bits < 0 ? max : bits;
    /* Clear the host bits, so a range is stored and shown in one spelling. */
    for (i = 0; i < max / 8; i++) {
        int keep = out->bits - i * 8;
        if (keep <= 0)
            out->addr[i] = 0;
        else if (keep < 8)
            out->addr[i] &= (unsigned char)(0xff << (8 - keep));
    }
    return OTP_OK;
}

int admin_net_match(const struct admin_net *net, const struct admin_net *ip)
{
    int full = net->bits / 8, rest = net->bits % 8;

    if (net->family != ip->family)
        return 0;
    if (memcmp(net->addr, ip->addr, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    return ((net->addr[full] ^ ip->addr[full]) & (unsigned char)(0xff << (8 - rest))) == 0;
}

void admin_net_text(const struct admin_net *net, char *out, size_t cap)
{
    char t[INET6_ADDRSTRLEN];

    inet_ntop(net->family == 4 ? AF_INET : AF_INET6, net->addr, t, sizeof(t));
    snprintf(out, cap, "%s/%d", t, net->bits);
}
