/* Just what nccl.h's declarations need from the CUDA runtime's headers, so
 * that check_nccl_abi.cc compiles without a CUDA toolkit. CUDART_VERSION
 * below 11000 keeps nccl.h from including the bf16/fp8 headers. */
#pragma once
#include <stddef.h> /* size_t, which the real headers bring */
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
#define CUDART_VERSION 10000
