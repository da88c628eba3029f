"""The commands, each run as ``python -m gptviz.commands.NAME`` (and, where shipped checkpoints or the README
record the old form, as ``python -m gptviz.NAME`` through a shim of the same name at the package's top):

    cli        the ``gptviz`` console command an installed wheel puts on the PATH: ``gptviz app|report|train``
    train      trains a model and writes its checkpoint (``python -m gptviz.train``; ``gptviz train``)
    report     one self-contained HTML report (``python -m gptviz.report``; ``gptviz report``)
    train_sae  trains the sparse autoencoder on a shipped model and writes it with its snippets
    neurons    precomputes the Neurons page's summary of a shipped checkpoint (``checkpoints/NAME.neurons.npz``)
"""
