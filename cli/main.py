def main() -> int:
    print("hi")
    return 0
