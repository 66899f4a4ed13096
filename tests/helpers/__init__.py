"""What the tests share: corpora made on the spot, real servers on 127.0.0.1, the DDP script torchrun runs."""
