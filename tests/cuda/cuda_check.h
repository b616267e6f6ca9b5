// CHECK(cudaCall): exit with the file, line, call and CUDA's message on error.
#ifndef GPUMEM_TEST_CUDA_CHECK_H
#define GPUMEM_TEST_CUDA_CHECK_H
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(x)                                                                                \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)
#endif
