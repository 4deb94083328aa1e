# A stand-in that makes `import torch` fail, put first on PYTHONPATH by the
# ctest model_torch_missing_fails_under_ci (tests/model/CMakeLists.txt): it
# checks that under CI=true the PyTorch cross-check fails instead of skipping.
raise ImportError("torch hidden on purpose by tests/python/without_torch")
