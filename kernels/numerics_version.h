// The numerics version of ablate's training math: the kernels here (attention, layers, optimizer
// rules, quantization, spectral maps), their CPU twins, and the trainer's use of them. ablate-train
// reports it with its build; the coordinator stores it per attempt, and `ablate results`,
// `ablate compare` and the export say when one cell mixes attempts of different versions.
//
// Bump it in the same commit as any change that may change a trained model's numbers for the same
// config and seed: a different rounding, accumulation order, reduction, scale granularity, default,
// data order or initialisation. Do not bump it for changes that keep results bit-identical
// (refactors checked by PTX comparison or by the golden tests, speed-ups that keep the order of
// every reduction). It is text so that a branch can mark its own (e.g. "3+det-dq").
#pragma once

#include <string_view>

namespace ablate::kernels {

inline constexpr std::string_view kNumericsVersion = "5";

}  // namespace ablate::kernels
