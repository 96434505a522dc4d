/*
 * phone_mask: a phone number as a log line may show it (the '+', the first
 * 4 digits, stars, the last 2). Pure C beside phone.cc's parse, so that any
 * layer can mask without the fraud guards (admin logs an unlock, otp a
 * monitored region).
 */
#include <string.h>

#include "phone.h"

void phone_mask(const char *phone, char *out, size_t cap)
{
    size_t n = phone != NULL && phone[0] == '+' ? strlen(phone + 1) : 0, i, o = 0;

    if (cap == 0)
        return;
    if (o + 1 < cap)
        out[o++] = '+';
    for (i = 0; i < n && o + 1 < cap; i++) {
        int shown = n > 6 && (i < 4 || i >= n - 2);
        out[o++] = shown ? phone[1 + i] : '*';
    }
    out[o] = '\0';
}
