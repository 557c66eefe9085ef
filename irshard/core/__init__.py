"""The base every other part stands on: errors and the one error line, the
spec grammar (meshes, shardings, types; element types in `dtypes`, the
user's text checked in `textinput`), leaf paths and the rules that match
them, source frames, printed-IR helpers, files written whole, the standard
streams while a command runs (`stdstreams`), interrupts, work
spread over threads and the JSON schemas of files read back.

Pure Python; imports nothing from irshard outside this package and nothing
heavy (no JAX, no MLIR).
"""
