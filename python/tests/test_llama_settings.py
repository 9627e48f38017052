"""The llama.cpp adapter's settings (kvspec.adapters.llama_cpp.settings): the
K/V cache types and what they imply, checked without loading llama.cpp."""
import pytest

from kvspec.adapters.llama_cpp import settings


def test_defaults_keep_f32_caches_without_flash_attention() -> None:
    s = settings()
    assert (s["type_k"], s["type_v"], s["flash_attn"], s["attn_rot"]) == ("f32", "f32", 0, 1)


def test_quantized_v_turns_flash_attention_on() -> None:
    s = settings({"type_k": "q8_0", "type_v": "q8_0"})
    assert (s["type_k"], s["type_v"], s["flash_attn"]) == ("q8_0", "q8_0", 1)
    assert settings({"type_k": "q8_0"})["flash_attn"] == 0
    assert settings({"type_v": "f16"})["flash_attn"] == 0
    assert settings({"type_k": "f16", "flash_attn": "1"})["flash_attn"] == 1


def test_unknown_cache_type_is_refused_naming_the_choices() -> None:
    with pytest.raises(ValueError, match=r"type_k='q5_1': expected one of f32, f16, q4_0, q8_0"):
        settings({"type_k": "q5_1"})
    with pytest.raises(ValueError, match=r"type_v='Q8_0'"):
        settings({"type_v": "Q8_0"})


def test_quantized_v_without_flash_attention_is_refused() -> None:
    with pytest.raises(ValueError, match="needs flash_attn=1"):
        settings({"type_v": "q8_0", "flash_attn": "0"})


def test_q4_0_values_need_the_rotation_off() -> None:
    with pytest.raises(ValueError, match="type_v=q4_0 needs attn_rot=0"):
        settings({"type_v": "q4_0"})
    s = settings({"type_k": "q4_0", "type_v": "q4_0", "attn_rot": "0"})
    assert (s["type_v"], s["attn_rot"], s["flash_attn"]) == ("q4_0", 0, 1)


@pytest.mark.parametrize("key,value", [("flash_attn", "2"), ("attn_rot", "-1"),
                                       ("flash_attn", "yes")])
def test_bad_switches_are_refused(key: str, value: str) -> None:
    with pytest.raises(ValueError, match="setting %s=" % key):
        settings({key: value})
