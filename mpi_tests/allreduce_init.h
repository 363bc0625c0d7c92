/*
 * The persistent allreduce of the MPI the tests are built against: MPI_Allreduce_init (MPI 4),
 * else Open MPI's MPIX_Allreduce_init (pcollreq extension, 4.1 and 5.0, whose MPI_VERSION is
 * 3). TEST_ALLREDUCE_INIT is left undefined when the MPI has neither.
 */
#ifndef ALLREDUCE_INIT_H
#define ALLREDUCE_INIT_H

#include <mpi.h>

#if MPI_VERSION >= 4
#define TEST_ALLREDUCE_INIT MPI_Allreduce_init
#elif defined(OPEN_MPI)
#include <mpi-ext.h>
#if defined(OMPI_HAVE_MPI_EXT_PCOLLREQ) && OMPI_HAVE_MPI_EXT_PCOLLREQ
#define TEST_ALLREDUCE_INIT MPIX_Allreduce_init
#endif
#endif

#endif
