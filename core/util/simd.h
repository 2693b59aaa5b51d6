// <immintrin.h> for the AVX-512 kernels, without GCC 12's false warnings.
//
// GCC 12 warns "__Y is (or may be) used uninitialized" inside its own AVX-512
// headers (GCC bug 105593): silence that one warning for these headers only.
#pragma once

#if defined(__AVX512F__)
#pragma GCC diagnostic push
#if !defined(__clang__)  // Clang reads GCC's pragmas too, but has no -Wmaybe-uninitialized
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
