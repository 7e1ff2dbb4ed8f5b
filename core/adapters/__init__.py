"""The only modules of the SDK that touch private torch APIs.

``torch_private`` wraps Dynamo, AOTAutograd, the partitioner, the decomposition
tables and fake tensors behind small functions, so a torch upgrade is mended in
one place. It is checked against torch 2.11 and 2.13.
"""
