/* A second file including twohop_half.h (half_allreduce's "handles" case): the program must see
 * one bfloat16 type and one SUM op, whichever file asks. */
#include "twohop_half.h"

MPI_Datatype half_other_bf16(void) { return twohop_type_bfloat16(); }
MPI_Op half_other_bf16_sum(void) { return twohop_half_op(MPI_SUM, twohop_type_bfloat16()); }
