// 16-bit floating-point formats and their conversions to and from f32.
//
// bfloat16 ("brain float") is the top half of an IEEE f32: 1 sign bit, the same
// 8 exponent bits, and 7 of the 23 mantissa bits.
//
//     f32:  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm
//     bf16: s eeeeeeee mmmmmmm                 (= f32 bits >> 16)
//
// So widening bf16 -> f32 is exact and free (shift left by 16); narrowing
// f32 -> bf16 drops 16 mantissa bits and must round.  Checkpoints of Qwen3 are
// stored in bf16: same range as f32, about 3 significant decimal digits.
//
// IEEE binary16 ("half", f16) has 1 sign, 5 exponent (bias 15) and 10 mantissa
// bits: more precision than bf16 but a range of only +-65504, with subnormals
// down to 2^-24.  Widening it to f32 is exact too but needs real work.
#pragma once

#include <bit>
#include <cstdint>

namespace kvscope {

// bf16 -> f32: exact.  The 16 bits become the high half of the f32.
inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// f32 -> bf16, rounding to nearest with ties to even (what PyTorch does).
//
// Adding 0x7FFF to the bits rounds the high half up exactly when the dropped low
// half is above 0x8000; adding one more when the kept half is odd breaks the
// exact tie 0x8000 towards an even result.  A carry out of the mantissa bumps the
// exponent, which is the right answer (up to and including overflow to inf).
// NaN must not go through this: a NaN whose payload is only in the low 16 bits
// would truncate to inf (or round to it), so NaN returns a quiet NaN of the same sign.
inline uint16_t f32_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: exponent all ones, mantissa nonzero
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // keep sign and payload top, set quiet bit
  }
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

// IEEE binary16 -> f32: exact, including subnormals, infinities and NaN.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {                 // inf (mant == 0) or NaN (payload kept, shifted up)
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {             // normal: rebias the exponent from 15 to 127
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {            // +-0
    bits = sign;
  } else {                           // subnormal: value = mant * 2^-24; normalise it
    int e = -1;                      // count the shifts that bring the leading 1 to bit 10
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    mant &= 0x3FFu;                  // drop the now implicit leading 1
    // after k = e + 1 shifts the value is 1.mant * 2^10 * 2^-k * 2^-24 = 1.mant * 2^(-15 - e)
    bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

}  // namespace kvscope
