/*
 * unittest: UNITTEST marks a file-local function that a unit test or a fuzz
 * target calls directly (curl's UNITTEST). It is `static` in the product
 * build and external only when the file is compiled with -DOTPD_TESTING,
 * where the test declares the prototype it uses. Nothing else may call a
 * UNITTEST function: it is not part of its module's API.
 */
#ifndef OTPD_UNITTEST_H
#define OTPD_UNITTEST_H

#ifdef OTPD_TESTING
#define UNITTEST
/* The test, not the module's header, holds the prototypes. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#else
#define UNITTEST static
#endif

#endif
