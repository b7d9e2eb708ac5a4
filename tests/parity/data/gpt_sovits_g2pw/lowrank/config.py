# G2PW model config, as G2PWModel_1.1's config.py sets it (read by g2pw's utils.load_config(use_default=True),
# which adds what is missing: param_conditional['affect_location'] = 'softmax', use_focal = False, ...)
manual_seed = 1313
model_source = 'bert-base-chinese'
window_size = 32
num_workers = 2
use_mask = True
use_conditional = True
param_conditional = {
    'bias': True,
    'char-linear': True,
    'pos-linear': False,
    'char+pos-second': True,
}

batch_size = 256
use_pos = True
param_pos = {
    'weight': 0.1,
    'pos_joint_training': True,
}
param_conditional.update({'char+pos-second': False, 'char+pos-second_lowrank': True, 'lowrank_size': 4})
