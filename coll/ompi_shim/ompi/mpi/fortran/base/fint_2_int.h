/*
 * Stand-in for an Open MPI header that ompi/op/op.h includes but neither Debian nor upstream's
 * devel-headers install (Open MPI 4.1 and 5.0 alike). Fortran INTEGER and C int are both 4 bytes in the supported builds,
 * so the conversions are identities (checked at compile time in coll/ompi/twohop_component.c).
 */
#ifndef TWOHOP_SHIM_FINT_2_INT_H
#define TWOHOP_SHIM_FINT_2_INT_H
#define OMPI_INT_2_FINT(a) (a)
#define OMPI_FINT_2_INT(a) (a)
#define OMPI_PFINT_2_PINT(a) (a)
#define OMPI_ARRAY_NAME_DECL(a)
#define OMPI_2_DIM_ARRAY_NAME_DECL(a, dim2)
#define OMPI_ARRAY_FINT_2_INT_ALLOC(in, n)
#define OMPI_ARRAY_FINT_2_INT(in, n)
#define OMPI_2_DIM_ARRAY_FINT_2_INT(in, n, dim2)
#define OMPI_ARRAY_FINT_2_INT_CLEANUP(in)
#define OMPI_SINGLE_NAME_DECL(a)
#define OMPI_SINGLE_FINT_2_INT(in)
#define OMPI_SINGLE_INT_2_FINT(in)
#define OMPI_ARRAY_INT_2_FINT(in, n)
#endif
