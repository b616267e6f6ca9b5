/* UNDER_ASAN: 1 when built with AddressSanitizer (make asan builds the
 * programs the tests run the same way). ASan reserves terabytes of shadow,
 * so no address-space limit (ulimit -v) can be set on such a program. */
#ifndef GPUMEM_TEST_UNDER_ASAN_H
#define GPUMEM_TEST_UNDER_ASAN_H
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif
#endif
