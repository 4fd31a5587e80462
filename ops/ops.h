// The whole op surface: include this, or just the family you need.
#pragma once

#include "ops/attention.h"
#include "ops/batch_norm.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/linalg.h"
#include "ops/loss.h"
#include "ops/mask.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "ops/softmax.h"
