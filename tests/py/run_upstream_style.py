"""Runs a script written for flash_attn / ring-flash-attention unchanged, with burst standing
in for both (burst.flash_attn_compat.install(), burst.ring_flash_attn.install()).
Usage: run_upstream_style.py SCRIPT [ARGS...]"""
import runpy
import sys

import burst.flash_attn_compat
import burst.ring_flash_attn

burst.flash_attn_compat.install()
burst.ring_flash_attn.install()
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
