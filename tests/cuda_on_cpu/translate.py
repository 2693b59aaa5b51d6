#!/usr/bin/env python3
"""Rewrites a kernels/*.cu file as C++ for the CPU stand-in (cuda_device.h).

Only three things change; every kernel body stays as written:
  kernel<<<grid, block, bytes>>>(args);   ->  cuda_on_cpu::launch("kernel", dim3(grid), dim3(block), bytes,
                                                                  [&] { kernel(args); });
  cudaFuncSetAttribute(kernel, ...)       ->  cudaFuncSetAttribute("kernel", ...)   (by name, as the launch)
  extern __shared__ float smem[];         ->  float* smem = (the launch's dynamic shared memory);
and the file starts by including cuda_runtime.h, as nvcc does for a .cu file.

usage: translate.py IN.cu OUT.cpp
"""
import re
import sys

LAUNCH = re.compile(r'([A-Za-z_]\w*(?:<[^<>;()]*>)?)<<<(.+?)>>>\(', re.S)
EXTERN_SHARED = re.compile(r'extern __shared__ (\w+) (\w+)\[\];')
FUNC_ATTRIBUTE = re.compile(r'cudaFuncSetAttribute\((\w+)(?:<[^<>;()]*>)?,')


def split_arguments(text):
    """The comma-separated parts of `text` that are not inside brackets."""
    parts, depth, part = [], 0, ''
    for ch in text:
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(part.strip())
            part = ''
        else:
            part += ch
    return parts + [part.strip()]


def closing_paren(text, start):
    """The index just past the ')' that closes the '(' before `start`."""
    depth = 1
    while depth:
        depth += {'(': 1, ')': -1}.get(text[start], 0)
        start += 1
    return start


def translate(src):
    out, i = '', 0
    for m in LAUNCH.finditer(src):
        if m.start() < i:
            continue
        end = closing_paren(src, m.end())
        config = split_arguments(m.group(2)) + ['0']  # shared bytes default to 0
        grid, block, shared = config[0], config[1], config[2]
        out += src[i:m.start()]
        name = m.group(1).split('<')[0]  # template arguments are not part of the name
        out += '::kvscope::cuda_on_cpu::launch("%s", dim3(%s), dim3(%s), size_t(%s), [&] { %s(%s); })' % (
            name, grid, block, shared, m.group(1), src[m.end():end - 1])
        i = end
    out += src[i:]
    out = FUNC_ATTRIBUTE.sub(r'cudaFuncSetAttribute("\1",', out)
    out = EXTERN_SHARED.sub(r'\1* \2 = static_cast<\1*>(::kvscope::cuda_on_cpu::dynamic_shared_memory());', out)
    return out


if __name__ == '__main__':
    source, target = sys.argv[1], sys.argv[2]
    with open(source) as f:
        text = translate(f.read())
    with open(target, 'w') as f:
        f.write('#include "cuda_runtime.h"\n#line 1 "%s"\n%s' % (source, text))
