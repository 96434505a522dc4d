/* phone: E.164 validation for every request; cheap. */
#include "phone.h"

int phone_valid(const char *s)
{
    size_t n = 0;

    if (s == NULL || s[0] != '+' || s[1] < '1' || s[1] > '9')
        return 0;
    for (s++; *s; s++, n++)
        if (*s < '0' || *s > '9')
            return 0;
    return n >= 7 && n <= 15;
}
