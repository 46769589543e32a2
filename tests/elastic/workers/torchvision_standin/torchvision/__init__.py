"""A stand-in for torchvision where it is not installed (no torchvision
release matches every torch this project tests with): Horovod's
examples/elastic/pytorch/pytorch_synthetic_benchmark_elastic.py imports
`torchvision.models` only to build `getattr(models, args.model)()`. Put on
PYTHONPATH by tests/elastic/test_horovod_elastic_examples.py alone."""
