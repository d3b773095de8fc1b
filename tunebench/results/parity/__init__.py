"""Loss parity: does an acceleration setting keep the loss of its baseline?

    verdicts.py  each experiment's per-step loss trajectory against its baseline's (the loss_parity_* columns)
    band.py      the band of trajectories that mean "the same numerics", from repeat noise (loss_band.csv: the
                 bands kept from evidence runs)
"""
