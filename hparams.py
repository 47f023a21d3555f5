"""Your hyperparameters: the one file you edit, as the original's hparams.py.

Every setting is declared once, with its type, default, allowed values and help, in
transformer_tf2/config/hparams.py; ``python train.py --help`` lists them with the value
each script will use and where it comes from (the default, this file, a preset, the
command line). Set any of them below as a plain assignment, ``name = value``, and every
script uses it: prepro.py, train.py, and the later scripts through the run's saved
settings. A preset that sets the same name wins over this file, and the command line
over both::

    python train.py --preset multi30k --d_model 512 --num_epochs 30

A trained run keeps the values it was trained with in ``<logdir>/hparams.json``: eval.py,
translate.py and export.py read the model's settings from there.
"""

# Examples (remove the "# " to use one):
# d_model = 256        # width of every layer's input and output (3.1)
# num_blocks = 3       # N: layers in the encoder and in the decoder (3.1)
# num_epochs = 8       # passes over the training data
