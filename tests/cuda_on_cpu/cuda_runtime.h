// What a .cu file gets from the toolkit without asking: the runtime and the device language.
#pragma once

#include "cuda_device.h"
#include "cuda_runtime_api.h"
