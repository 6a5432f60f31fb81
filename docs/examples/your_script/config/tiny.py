# A small run: a few seconds on two CPU processes.
max_iters = 40
eval_interval = 10
batch_size = 4
n_layer = 1
