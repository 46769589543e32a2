/* Empty: see cuda_runtime.h here. */
#pragma once
