/*
 * The checking rows of coll/params.def, read once: each parameter's range (TWOHOP_RANGE) and the
 * parameters every rank of a communicator must share (TWOHOP_AGREED). Set-up (comm_setup.cpp)
 * checks the ranges of its own values and allgathers the agreed ones (as 64-bit words, in table
 * order) to compare them; both front ends (the Open MPI component, the PMPI library) go through
 * it. Pure (no MPI, UCX or CUDA): tests/test_param_table.cpp.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "params.h"
#include "twohop_core.h"

namespace twohop {

/* Number of TWOHOP_AGREED rows. */
constexpr size_t kAgreedParams = 0
#define TWOHOP_PARAM(name, kind, def, level, doc)
#define TWOHOP_AGREED(name) +1
#include "params.def"
#undef TWOHOP_AGREED
#undef TWOHOP_PARAM
    ;

/* The first parameter of p outside its TWOHOP_RANGE row, as "coll_twohop_<name>: value V is out
 * of range LO..HI"; "" when every one is in range. */
std::string param_range_error(const twohop_params &p);

/* p's agreed parameters as words, in table order (bools 0/1, ints sign-extended). */
void agreed_words(const twohop_params &p, uint64_t out[kAgreedParams]);

/* "" when the words of ranks ra and rb are equal; else "coll_twohop_<name> differs between
 * ranks RA (VA) and RB (VB)" for the first parameter that differs. */
std::string agreed_mismatch(const uint64_t a[kAgreedParams], const uint64_t b[kAgreedParams],
                            int ra, int rb);

} // namespace twohop
