"""Dead-code elimination: keep only nodes that outputs and updates depend on."""
from .program import Program, rebuild


def dce(program: Program) -> Program:
    return rebuild(program)
