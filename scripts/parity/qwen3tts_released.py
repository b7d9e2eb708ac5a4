"""The released Qwen3-TTS 12 Hz codec decoder's configuration (Qwen/Qwen3-TTS-Tokenizer-12Hz, decoder_config as
published), shared by the live codec checks and the full-size benchmark. Data only: no imports, no side effects."""

RELEASED_DECODER = dict(codebook_size=2048, codebook_dim=512, num_quantizers=16, latent_dim=1024, hidden_size=512,
                        num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16, head_dim=64,
                        intermediate_size=1024, hidden_act="silu", attention_bias=False, rms_norm_eps=1e-5,
                        rope_theta=10000, sliding_window=72, max_position_embeddings=8000,
                        layer_scale_initial_scale=0.01, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2],
                        decoder_dim=1536, num_semantic_quantizers=1, semantic_codebook_size=4096,
                        vector_quantization_hidden_dimension=512)
